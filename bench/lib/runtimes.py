"""Figures of the interpreter and JIT rows (bench/rows/36-python.sh, 37-jit.sh), read from
folded stacks (root first, `;`-separated, weight last) whatever tool wrote them.

A frame names function NAME of the program when it reads, in any tool's way:
  flamerec's Python frames    NAME (/path/prog.py)
  py-spy's                    NAME (prog.py:LINE)  or  NAME (/path/prog.py:LINE)
  CPython's perf trampolines  py::NAME:/path/prog.py
  V8's perf map and jitdump   JS:*NAME /path/prog.js:4:13  (also with ~ or ^ for the tier)
  Java's (perf map, agent)    int KnownProfile.NAME(int), LKnownProfile:NAME(I)I (perf's agent)

usage:
  runtimes.py shares FOLDED PROGRAM ENTRY A B C
      → samples, % of samples naming a frame of PROGRAM, % of those reaching ENTRY
        (`<module>` for Python, `main` for JS and Java), % of those whose root-most frame is a
        thread's entry (as `whole`), and the shares of A, B and C among the samples whose
        innermost program frame is one of them (tab-separated)
  runtimes.py agree FOLDED PROGRAM
      → samples showing frame-chain frames of PROGRAM, and how many of them still show a perf
        trampoline of it (tab-separated; see agree())
  runtimes.py unnamed FOLDED → % of samples whose leaf is anonymous memory no name was found
        for (flamerec's `[anon]+0x…`, perf's `[unknown]` or `perf-PID.map+0x…`)
  runtimes.py samply PROFILE.json.gz → samply's saved profile as folded text (the thread's
        name first; what samply did not name stays an address)
  runtimes.py top FOLDED N → the N functions most often innermost among the Python frames of
        any file, as `NAME (FILE-BASENAME)<TAB>percent of those samples`
  runtimes.py workers FOLDED MASTER-PID PROGRAM ENTRY A B...
      → for a pre-fork server's workers, every process of the recording but MASTER-PID (the
        process read from flamerec's `fold --per-process` root `comm-PID` or py-spy's
        `process PID:"…"` frames, a child's after its parent's): their number, their samples,
        the master's samples, % of the workers' samples showing a Python frame (of a .py file,
        or a `<module>`), % showing a frame of PROGRAM, % of those showing a frame named ENTRY
        (any file's: a forked worker's stack starts in the server's script), and the shares of
        A, B… as in `shares` (tab-separated)
"""
import re
import sys
from collections import Counter

PY_CHAIN = re.compile(r"^(?P<name>[^ ;]+) \((?P<file>[^()]*?\.py)(?::\d+)?\)$")
PY_TRAMP = re.compile(r"^py::(?P<name>[^:]+):(?P<file>.*\.py)$")
JS = re.compile(r"^(?:JS:|LazyCompile:)?[*~^+]?(?P<name>[\w$<>.]+) (?P<file>\S+\.js)(?::\d+)*$")
JAVA = re.compile(r"^(?:[\w\[\]]+ )?L?(?P<file>KnownProfile)(?:;::|::|;|:|\.)(?P<name>\w+)")


def stacks(path):
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            stack, _, n = line.rpartition(" ")
            if not stack or not n.isdigit():
                continue
            yield stack.split(";"), int(n)


def program_frame(frame, program):
    """(name, how) when `frame` names a function of `program` (a file's base name)."""
    for pat, how in ((PY_CHAIN, "chain"), (PY_TRAMP, "trampoline"), (JS, "js"), (JAVA, "java")):
        m = pat.match(frame)
        if m and m.group("file").rsplit("/", 1)[-1].startswith(program):
            return m.group("name"), how
    return None


def shares(path, program, entry, funcs):
    total = named = whole = rooted = 0
    by = Counter()
    for frames, n in stacks(path):
        total += n
        mine = [p for p in (program_frame(f, program) for f in frames) if p]
        if not mine:
            continue
        named += n
        if any(name == entry for name, _ in mine):
            whole += n
        if at_entry(frames):
            rooted += n
        which = attributed(mine, funcs)
        if which:
            by[which] += n
    three = sum(by.values())
    pct = lambda a, b: "%.1f" % (100 * a / b) if b else "nan"
    return [str(total), pct(named, total), pct(whole, named), pct(rooted, named)] + [
        pct(by[f], three) for f in funcs
    ]


def attributed(mine, funcs):
    """The one of `funcs` a sample counts for: its innermost program frame, or for a leaf
    helper (spin, unit, <genexpr>) the innermost of `funcs` above it; None when neither."""
    for name, _ in reversed(mine):
        if name in funcs:
            return name
    return None


PYSPY_PROCESS = re.compile(r'^process (\d+):"')
PER_PROCESS_ROOT = re.compile(r"^.*-(\d+)$")


def process_of(frames):
    """(pid, the frames below the process's) of a stack: py-spy --subprocesses puts a
    `process PID:"cmdline"` frame for the recorded process and one for each process between
    it and the sampled one; flamerec's `fold --per-process`, `comm-PID` as the root."""
    k = 0
    while k < len(frames) and PYSPY_PROCESS.match(frames[k]):
        k += 1
    if k:
        return PYSPY_PROCESS.match(frames[k - 1]).group(1), frames[k:]
    m = PER_PROCESS_ROOT.match(frames[0])
    return (m.group(1) if m else None), frames[1:]


def workers(path, master, program, entry, funcs):
    pids = set()
    total = master_n = python = named = whole = 0
    by = Counter()
    for frames, n in stacks(path):
        pid, below = process_of(frames)
        if pid == master:
            master_n += n
            continue
        pids.add(pid)
        total += n
        if any(PY_CHAIN.match(f) or f.startswith("<module> (") for f in below):
            python += n
        mine = [p for p in (program_frame(f, program) for f in below) if p]
        if not mine:
            continue
        named += n
        if any(f.startswith(entry + " (") for f in below):
            whole += n
        which = attributed(mine, funcs)
        if which:
            by[which] += n
    views = sum(by.values())
    pct = lambda a, b: "%.1f" % (100 * a / b) if b else "nan"
    return [str(len(pids)), str(total), str(master_n), pct(python, total), pct(named, total),
            pct(whole, named)] + [pct(by[f], views) for f in funcs]


ENTRIES = {"_start", "start", "clone", "clone3", "start_thread", "__clone3", "__clone", "thread_start"}


def at_entry(frames):
    """The root-most frame below the thread's name is a thread's entry (bench/run's
    entry_share)."""
    root = frames[1] if len(frames) > 1 else ""
    return root.lstrip("_") in {e.lstrip("_") for e in ENTRIES} or (
        len(frames) > 2 and frames[2].startswith("__libc_start_main")
    )


def samply(path):
    import gzip
    import json

    profile = json.load(gzip.open(path))
    for t in profile["threads"]:
        strings, funcs = t["stringArray"], t["funcTable"]["name"]
        frame_func, stack = t["frameTable"]["func"], t["stackTable"]
        out = Counter()
        for s in t["samples"]["stack"]:
            frames = []
            while s is not None:
                frames.append(strings[funcs[frame_func[stack["frame"][s]]]])
                s = stack["prefix"][s]
            out[";".join([t.get("processName") or t["name"]] + frames[::-1])] += 1
        for k, n in out.items():
            print("%s %d" % (k, n))


UNNAMED = re.compile(r"^(\[anon\](\+0x[0-9a-f]+)?|\[unknown\]|perf-\d+\.map\+0x[0-9a-f]+|\[jit\]\+0x[0-9a-f]+)$")


def unnamed(path):
    total = hit = 0
    for frames, n in stacks(path):
        total += n
        if UNNAMED.match(frames[-1]):
            hit += n
    return ["%.2f" % (100 * hit / total) if total else "nan"]


def agree(path, program):
    """Samples showing frames of PROGRAM from the frame chain, and how many of them still show a
    perf trampoline: the recorder drops a trampoline beside the frame it names, so one left
    beside chain frames named other code at that sample (or stood where no run was spliced)."""
    chain = left = 0
    for frames, n in stacks(path):
        mine = [p for p in (program_frame(f, program) for f in frames) if p]
        if any(how == "chain" for _, how in mine):
            chain += n
            if any(how == "trampoline" for _, how in mine):
                left += n
    return [str(chain), str(left)]


def top(path, count):
    by = Counter()
    total = 0
    for frames, n in stacks(path):
        inner = None
        for f in frames:
            m = PY_CHAIN.match(f)
            if m:
                inner = "%s (%s)" % (m.group("name"), m.group("file").rsplit("/", 1)[-1])
        if inner:
            by[inner] += n
            total += n
    return ["%s\t%.1f" % (k, 100 * v / total) for k, v in by.most_common(int(count))]


def main(argv):
    what, args = argv[1], argv[2:]
    if what == "shares":
        print("\t".join(shares(args[0], args[1], args[2], args[3:])))
    elif what == "unnamed":
        print("\t".join(unnamed(args[0])))
    elif what == "samply":
        samply(args[0])
    elif what == "agree":
        print("\t".join(agree(args[0], args[1])))
    elif what == "workers":
        print("\t".join(workers(args[0], args[1], args[2], args[3], args[4:])))
    elif what == "top":
        print("\n".join(top(args[0], args[1])))
    else:
        sys.exit("runtimes.py: unknown figure %s" % what)


if __name__ == "__main__":
    main(sys.argv)
