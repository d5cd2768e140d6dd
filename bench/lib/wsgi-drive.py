"""Runs gunicorn under a recorder, drives it over loopback and stops it: the workload of the
pre-fork server rows (bench/rows/38-gunicorn.sh, issue 45).

usage: wsgi-drive.py --gunicorn BIN --app FILE --seconds S --report FILE -- [RECORDER...]

  1. starts `RECORDER... BIN -w 2 -b 127.0.0.1:PORT --pid PIDFILE --chdir DIR MODULE:app`,
     PORT a free one, DIR and MODULE the app FILE's directory and name: the recorder starts
     gunicorn's master and follows the workers the master forks (no RECORDER: bare);
  2. waits until a worker answers (a request for a path the app has no view for: 404);
  3. runs FILE's client (`FILE client PORT S`, with this interpreter; not recorded), which
     requests the two views in turn for S seconds;
  4. stops gunicorn with SIGTERM to the master (its pid from PIDFILE): gracefully, the
     workers exit, then the master, so the recorder's command ends and it writes its file;
     waits for the recorder;
  5. writes `master PID`, `requests N` and `seconds T` (the client's count and its own
     clock) to the report FILE.

gunicorn's log and the recorder's output go to this script's stderr. It fails, killing what
it started, when the server does not answer within 60 s, the client fails, or the server
has not stopped 60 s after SIGTERM.
"""

import argparse
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

WAIT_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/ready")
        conn.getresponse().read()
        conn.close()
        return True
    except OSError:
        return False


def master_of(pidfile):
    """The master's pid from gunicorn's --pid file, or None before it is written."""
    try:
        with open(pidfile) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def signal_master(master, sig):
    if master is None:
        return
    try:
        os.kill(master, sig)
    except ProcessLookupError:
        pass


def fail(msg):
    sys.exit("wsgi-drive: " + msg)


def main():
    # The recorder's command comes after the first `--` and may hold `--` itself.
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(prog="wsgi-drive.py")
    ap.add_argument("--gunicorn", required=True)
    ap.add_argument("--app", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--report", required=True)
    args = ap.parse_args(argv[:cut])
    recorder = argv[cut + 1:]

    app = os.path.abspath(args.app)
    module = os.path.splitext(os.path.basename(app))[0]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="wsgi-drive.") as tmp:
        pidfile = os.path.join(tmp, "master.pid")
        server_cmd = recorder + [
            args.gunicorn, "-w", "2", "-b", "127.0.0.1:%d" % port, "--pid", pidfile,
            "--chdir", os.path.dirname(app), "--log-level", "warning", module + ":app",
        ]
        # No __pycache__ left beside the app in the source tree, and the same work each run.
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        server = subprocess.Popen(server_cmd, stdin=subprocess.DEVNULL, stdout=sys.stderr, env=env)
        master = None
        try:
            deadline = time.monotonic() + WAIT_S
            while not answers(port):
                if server.poll() is not None:
                    fail("the server exited (%d) before it answered on port %d" % (server.returncode, port))
                if time.monotonic() > deadline:
                    fail("no answer on port %d after %d s" % (port, WAIT_S))
                time.sleep(0.05)
            master = master_of(pidfile)
            if master is None:
                fail("no master pid in %s once the server answered" % pidfile)

            client = subprocess.run(
                [sys.executable, app, "client", str(port), str(args.seconds)],
                stdout=subprocess.PIPE, text=True,
            )
            if client.returncode != 0:
                fail("the client failed (%d)" % client.returncode)
            requests, seconds = client.stdout.split()

            os.kill(master, signal.SIGTERM)
            try:
                server.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                fail("the server had not stopped %d s after SIGTERM" % WAIT_S)
            if server.returncode != 0:
                fail("the server exited %d" % server.returncode)
        finally:
            if server.poll() is None:
                # A failure above: a quick stop of the master (SIGINT: the workers are
                # killed), else the master and the recorder killed.
                master = master or master_of(pidfile)
                signal_master(master, signal.SIGINT)
                try:
                    server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    signal_master(master, signal.SIGKILL)
                    server.kill()
                    server.wait()

    with open(args.report, "w") as f:
        f.write("master %d\nrequests %s\nseconds %s\n" % (master, requests, seconds))


if __name__ == "__main__":
    main()
