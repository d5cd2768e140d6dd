"""A parent that starts 4 CPython children 50 ms apart (fork and exec, as
subprocess does), each spending its life in `spin`, and waits for them:
what `record -p` meets when it attaches while a program starts children."""

import subprocess
import sys
import time

CHILD = "def spin():\n    t = 0\n    for i in range(30000000):\n        t += i\nspin()\n"

kids = []
for _ in range(4):
    kids.append(subprocess.Popen([sys.executable, "-c", CHILD]))
    time.sleep(0.05)
for k in kids:
    k.wait()
