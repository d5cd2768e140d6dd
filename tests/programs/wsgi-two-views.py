"""A WSGI application with two views of known cost, and the client that drives it: the
pre-fork server rows of the bench (bench/rows/38-gunicorn.sh, issue 45).

    gunicorn -w 2 --chdir tests/programs wsgi-two-views:app
        serves it (importlib finds the module by its file name, hyphens and all);
    python3 tests/programs/wsgi-two-views.py client PORT SECONDS
        requests /slow and /fast in turn over loopback, one request at a time, for
        SECONDS, then prints `REQUESTS ELAPSED-SECONDS`.

`/slow` runs `unit` three times and `/fast` once, and the client asks for each as often as
the other: of the samples inside either view, slow_view takes 75% and fast_view 25%. What a
request costs besides (parsing it, writing the response) is gunicorn's and this module's
`app`, outside both views."""

import http.client
import sys
import time


def unit():
    """≈ 5 ms of pure-Python work on CPython 3.12 here."""
    total = 0
    for i in range(100000):
        total += i * i
    return total


def slow_view():
    for _ in range(3):
        unit()
    return b"slow\n"


def fast_view():
    unit()
    return b"fast\n"


VIEWS = {"/slow": slow_view, "/fast": fast_view}


def app(environ, start_response):
    view = VIEWS.get(environ.get("PATH_INFO", ""))
    if view is None:
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"no such view\n"]
    body = view()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def client(port, seconds):
    """Both views in turn until SECONDS have passed; a new connection each time (gunicorn's
    sync workers close it after each response). Fails on anything but 200."""
    start = time.monotonic()
    end = start + seconds
    done = 0
    while time.monotonic() < end:
        for path in ("/slow", "/fast"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            conn.close()
            if resp.status != 200:
                sys.exit("wsgi-two-views client: GET %s answered %d" % (path, resp.status))
            done += 1
    print(done, "%.3f" % (time.monotonic() - start))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "client":
        sys.exit("usage: wsgi-two-views.py client PORT SECONDS")
    client(int(sys.argv[2]), float(sys.argv[3]))
