"""A Python workload whose profile is known by construction, for flamerec's
tests and benchmark: the main thread runs rounds of py_alpha, py_beta and
py_gamma (5, 3 and 2 units of the same loop: 50/30/20 of its time), each
called at the bottom of a 30-deep recursion of `descend`; a second thread,
`py_worker`, compresses a buffer with zlib (a C extension) meanwhile.

Usage: known.py [ROUNDS]   (default 1000: about one second of CPU)"""
import sys
import threading
import zlib

DEPTH = 30
UNIT = 2000


def unit_of_work(n):
    s = 0
    i = 0
    while i < n:
        s += i * i
        i += 1
    return s


def py_alpha():
    return sum(unit_of_work(UNIT) for _ in range(5))


def py_beta():
    return sum(unit_of_work(UNIT) for _ in range(3))


def py_gamma():
    return sum(unit_of_work(UNIT) for _ in range(2))


def descend(depth, work):
    if depth == 0:
        return work()
    return descend(depth - 1, work)


def py_worker(stop):
    data = bytes(range(256)) * 512
    while not stop.is_set():
        zlib.compress(data, 6)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    stop = threading.Event()
    worker = threading.Thread(target=py_worker, args=(stop,), name="py-worker")
    worker.start()
    total = 0
    for _ in range(rounds):
        for work in (py_alpha, py_beta, py_gamma):
            total += descend(DEPTH - 1, work)
    stop.set()
    worker.join()
    return total


if __name__ == "__main__":
    main()
