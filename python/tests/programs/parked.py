"""Threads parked in time.sleep under known Python stacks, for the reader's
tests. Runs on CPython 3.8 and later. Writes each parked thread's own view
of its stack (innermost first: qualified name, line) as JSON to argv[1],
keyed by native thread id, then sleeps until killed.

The stacks: a plain recursion (inlined into one eval-loop call on 3.11+),
a recursion through the C builtin map() (one eval-loop call per level), a
generator, a class's __init__ after its call site specialised, and a
function whose name is not ASCII."""
import json
import sys
import threading
import time

PARKED = threading.Barrier(5)


def name_of(code):
    return getattr(code, "co_qualname", code.co_name)


def park():
    PARKED.wait()
    time.sleep(3600)


def descend(n):
    if n == 0:
        park()
    else:
        descend(n - 1)


def through_map(n):
    if n == 0:
        park()
    else:
        list(map(through_map, [n - 1]))


def generating():
    def values():
        yield 1
        park()
        yield 2

    for _ in values():
        pass


class Gadget:
    def __init__(self, last):
        if last:
            park()


def build_gadgets():
    for i in range(100):
        Gadget(i == 99)


def naïve():
    descend(3)


def report(path):
    PARKED.wait()
    me = threading.get_ident()
    while True:
        frames = {
            t: f for t, f in sys._current_frames().items() if t != me
        }
        if sum(1 for f in frames.values() if f.f_code.co_name == "park") == 4:
            break
        time.sleep(0.01)
    # Idents to native ids: every thread but this one.
    native = {t.ident: t.native_id for t in threading.enumerate() if t.ident != me}
    out = {}
    for ident, frame in frames.items():
        stack = []
        while frame is not None:
            stack.append([name_of(frame.f_code), frame.f_lineno])
            frame = frame.f_back
        out[str(native[ident])] = stack
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    import os

    os.rename(path + ".tmp", path)


def main():
    workers = [
        threading.Thread(target=through_map, args=(3,), daemon=True),
        threading.Thread(target=generating, daemon=True),
        threading.Thread(target=build_gadgets, daemon=True),
        threading.Thread(target=report, args=(sys.argv[1],)),
    ]
    for t in workers:
        t.start()
    naïve()


main()
