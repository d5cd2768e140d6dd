# A known profile for JIT tests: fa, fb and fc take 50/30/20 of the time,
# under a 30-deep Python recursion (so whole stacks pass through 30
# interpreter entries, each behind a perf trampoline with -X perf).
import sys


def spin(n):
    s = 0
    for i in range(n):
        s += i
    return s


def fa():
    return spin(50_000)


def fb():
    return spin(30_000)


def fc():
    return spin(20_000)


def deep(d, rounds):
    if d == 0:
        for _ in range(rounds):
            fa()
            fb()
            fc()
        return
    deep(d - 1, rounds)


deep(30, int(sys.argv[1]) if len(sys.argv) > 1 else 400)
