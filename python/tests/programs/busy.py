"""Spins forever in `leaf`, under `middle` recursing 20 deep under `outer`:
a thread that is running Python whenever it is sampled. Prints "ready"
once the stack stands."""
import sys

DEPTH = 20


def leaf():
    print("ready", flush=True)
    i = 0
    while True:
        i += 1


def middle(n):
    if n == 0:
        leaf()
    else:
        middle(n - 1)


def outer():
    middle(DEPTH - 1)


outer()
