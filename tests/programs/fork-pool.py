"""Python work in forked processes, as multiprocessing, pre-fork servers and
os.fork() make them: `fork-pool.py METHOD ROUNDS` runs ROUNDS tasks in a
pool of 2 workers started by METHOD (`fork`, `forkserver`, `spawn`), or
with `os-fork` in 2 children of os.fork(). Each task spends 60/40 of its
time in `work_a` and `work_b` (6 and 4 units of the same loop); the parent
only waits."""

import multiprocessing
import os
import sys


def unit():
    total = 0
    for i in range(20000):
        total += i * i
    return total


def work_a():
    for _ in range(6):
        unit()


def work_b():
    for _ in range(4):
        unit()


def task(_i):
    work_a()
    work_b()
    return os.getpid()


def main():
    method = sys.argv[1] if len(sys.argv) > 1 else "fork"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    if method == "os-fork":
        children = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                for i in range(rounds // 2):
                    task(i)
                os._exit(0)
            children.append(pid)
        for pid in children:
            os.waitpid(pid, 0)
        return
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(2) as pool:
        workers = set(pool.map(task, range(rounds), chunksize=1))
    print(f"{len(workers)} workers")


if __name__ == "__main__":
    main()
