# The code interpreter's client inside the sandbox (/usr/lib/dsec/interp_client.py).
# The Python SDK's run_code runs it through an ordinary exec, so run_code
# works on every backend and in `network: none` sandboxes, with no port
# reachable from outside. It reads one request as JSON on stdin,
#
#   {"method": "POST", "path": "/execute", "body": {...}, "wait_s": 30}
#
# sends it to the server on 127.0.0.1:49999 (waiting up to wait_s for the
# server to listen: it starts with the sandbox), and prints the answer's
# NDJSON lines as they arrive. A non-2xx answer, or no server, is printed
# as one line {"type": "http_error", "status", "message"} (status 503: the
# server is not running) and the exit status is 3.
import http.client
import json
import socket
import sys
import time

HOST, PORT = "127.0.0.1", 49999


def out(line):
    sys.stdout.write(line if line.endswith("\n") else line + "\n")
    sys.stdout.flush()


def fail(status, message):
    out(json.dumps({"type": "http_error", "status": status, "message": message}))
    sys.exit(3)


def connect(wait_s):
    deadline = time.monotonic() + wait_s
    while True:
        try:
            conn = http.client.HTTPConnection(HOST, PORT, timeout=None)
            conn.connect()
            return conn
        except (ConnectionRefusedError, FileNotFoundError, socket.timeout):
            if time.monotonic() >= deadline:
                fail(503, "the code interpreter is not running: nothing listens on %s:%d "
                          "in the sandbox (waited %g s)" % (HOST, PORT, wait_s))
            time.sleep(0.05)


def main():
    req = json.loads(sys.stdin.read() or "{}")
    conn = connect(float(req.get("wait_s", 30)))
    body = req.get("body")
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    conn.request(req.get("method", "GET"), req.get("path", "/health"), body=data, headers=headers)
    resp = conn.getresponse()
    if resp.status // 100 != 2:
        fail(resp.status, resp.read().decode("utf-8", "replace").strip())
    if resp.getheader("Content-Type", "").startswith("application/x-ndjson"):
        while True:
            line = resp.readline()
            if not line:
                break
            out(line.decode("utf-8", "replace"))
    else:
        text = resp.read().decode("utf-8", "replace")
        out(json.dumps({"type": "http_body", "status": resp.status, "body": text}))


if __name__ == "__main__":
    main()
