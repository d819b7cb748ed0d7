# The code interpreter's server (the `base/code-interpreter@1` layer starts it
# at sandbox start). It speaks the HTTP protocol the unmodified
# @e2b/code-interpreter SDK (2.x) expects on port 49999:
#
#   GET  /health                  -> 200 "OK"
#   POST /execute                 {"code", "context_id"?, "language"?, "env_vars"?,
#                                  "timeout"? (dsec: seconds, then the cell is interrupted)}
#                                 -> 200, NDJSON lines as they happen: stdout, stderr,
#                                    result (E2B keys: text, png, html, ...,
#                                    is_main_result), error (name, value, traceback),
#                                    number_of_executions, end_of_execution
#   POST /contexts                {"language"?, "cwd"?} -> {"id", "language", "cwd"}
#   GET  /contexts                -> [{"id", "language", "cwd"}, ...]
#   DELETE /contexts/{id}         -> 204
#   POST /contexts/{id}/restart   -> 204 (its globals are gone)
#
# Errors are plain text with 400 (bad request, unsupported language) or 404
# (unknown context or route). Each context is one worker process (worker.py)
# holding its globals; cells of one context run one at a time, in order. A
# client that goes away mid-cell, or a cell past its "timeout", interrupts
# the cell (SIGINT); a cell that ignores that for KILL_AFTER_S is killed and
# its context restarted (state lost, said in the error). Python only.
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOST, PORT = os.environ.get("DSEC_INTERP_HOST", "0.0.0.0"), int(os.environ.get("DSEC_INTERP_PORT", "49999"))
HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
LANGUAGES = ("python", "python3")
# After an interrupt, how long a cell may take to stop before its worker is killed.
KILL_AFTER_S = 5.0
# How often a running cell's client connection is checked for a hang-up.
POLL_S = 0.25


def default_cwd():
    for d in ("/home/user", "/work"):
        if os.path.isdir(d):
            return d
    return "/"


def cpu_has(flag):
    """Whether /proc/cpuinfo lists `flag` (True if it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return flag in line.split()
    except OSError:
        pass
    return True


class Context:
    """One worker process and what it needs to run cells."""

    def __init__(self, language="python", cwd=None):
        self.id = str(uuid.uuid4())
        self.language = "python"
        self.cwd = cwd or default_cwd()
        self.lock = threading.Lock()  # one cell at a time
        self.count = 0
        self.proc = None
        self.start()

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def start(self):
        cin_r, self.cin = os.pipe()
        self.cout, cout_w = os.pipe()
        env = dict(os.environ)
        env["MPLBACKEND"] = "module://mpl_backend"
        env["PYTHONPATH"] = HERE + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.pop("DSEC_INTERP_PORT", None)
        if "OPENBLAS_CORETYPE" not in env and not cpu_has("ssse3"):
            # OpenBLAS takes QEMU's emulated qemu64 CPU (a microVM under TCG)
            # for an AMD core and runs code it lacks: SIGILL in any numpy
            # matrix product. The SSE3 kernels run on every x86-64 here.
            env["OPENBLAS_CORETYPE"] = "Prescott"
        self.proc = subprocess.Popen(
            [sys.executable, "-u", WORKER, str(cin_r), str(cout_w)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(cin_r, cout_w), cwd=self.cwd, env=env, start_new_session=True)
        os.close(cin_r)
        os.close(cout_w)
        for fd in (self.cout, self.proc.stdout.fileno(), self.proc.stderr.fileno()):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self.pending = b""

    def stop(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for fd in (self.cin, self.cout):
            os.close(fd)
        self.proc.stdout.close()
        self.proc.stderr.close()
        self.proc = None

    def restart(self):
        self.stop()
        self.count = 0
        self.start()

    def run(self, code, env_vars, timeout, emit, hung_up):
        """Runs one cell, calling emit(msg) for each message in order;
        hung_up() tells whether the client went away."""
        self.count += 1
        req = json.dumps({"code": code, "env_vars": env_vars or {}}) + "\n"
        os.write(self.cin, req.encode())
        out_fd, err_fd = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        start = time.monotonic()
        interrupted_at = None
        timed_out = False
        decoders = {out_fd: b"", err_fd: b""}

        def drain(fd, name):
            while True:
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    return
                if not data:
                    return
                buf = decoders[fd] + data
                # Keep an incomplete UTF-8 sequence for the next read.
                cut = len(buf)
                for back in range(1, min(4, len(buf)) + 1):
                    b = buf[-back]
                    if b & 0xC0 == 0x80:
                        continue
                    need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
                    if need > back:
                        cut = len(buf) - back
                    break
                decoders[fd] = buf[cut:]
                emit({"type": name, "text": buf[:cut].decode("utf-8", "replace"),
                      "timestamp": int(time.time() * 1e6)})

        while True:
            now = time.monotonic()
            if interrupted_at is None and timeout and now - start > timeout:
                timed_out = True
                interrupted_at = now
                self.interrupt()
            if interrupted_at is None and hung_up():
                interrupted_at = now
                self.interrupt()
            if interrupted_at is not None and now - interrupted_at > KILL_AFTER_S:
                self.restart()
                emit({"type": "error", "name": "TimeoutError" if timed_out else "KeyboardInterrupt",
                      "value": "the cell did not stop within %g s of its interrupt: the context's "
                               "interpreter was restarted and its state is lost" % KILL_AFTER_S,
                      "traceback": ""})
                return
            ready, _, _ = select.select([self.cout, out_fd, err_fd], [], [], POLL_S)
            if out_fd in ready:
                drain(out_fd, "stdout")
            if err_fd in ready:
                drain(err_fd, "stderr")
            if self.cout not in ready:
                continue
            try:
                data = os.read(self.cout, 1 << 20)
            except BlockingIOError:
                continue
            if not data:  # the worker died (os._exit, a crash, the OOM killer)
                drain(out_fd, "stdout")
                drain(err_fd, "stderr")
                status = self.proc.wait()
                self.restart()
                emit({"type": "error", "name": "DeadKernelError",
                      "value": "the context's interpreter exited (status %d): its state is lost "
                               "and a new one was started" % status, "traceback": ""})
                return
            self.pending += data
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("type") == "done":
                    # What the cell wrote to fds 1 and 2 before it ended is in the pipes now.
                    drain(out_fd, "stdout")
                    drain(err_fd, "stderr")
                    return
                if timed_out and msg.get("type") == "error" and msg.get("name") == "KeyboardInterrupt":
                    msg["name"] = "TimeoutError"
                    msg["value"] = ("the cell ran past its timeout of %g s and was interrupted "
                                    "(the context keeps its state)" % timeout)
                if msg.get("type") in ("stdout", "stderr"):
                    msg["timestamp"] = int(time.time() * 1e6)
                emit(msg)

    def interrupt(self):
        try:
            os.kill(self.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass


class Contexts:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_id = {}
        self.default = self.create("python", None)

    def create(self, language, cwd):
        ctx = Context(language, cwd)
        with self.lock:
            self.by_id[ctx.id] = ctx
        return ctx

    def get(self, cid):
        with self.lock:
            return self.by_id.get(cid)

    def remove(self, cid):
        with self.lock:
            ctx = self.by_id.pop(cid, None)
            if ctx is self.default:
                self.default = None
        return ctx

    def default_context(self):
        with self.lock:
            if self.default is not None:
                return self.default
        ctx = self.create("python", None)
        with self.lock:
            self.default = ctx
        return ctx

    def all(self):
        with self.lock:
            return list(self.by_id.values())


CONTEXTS = None


class BadRequest(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def check_language(language):
    if language is not None and language not in LANGUAGES:
        raise BadRequest(400, 'language "%s" is not supported by this code interpreter '
                              "(it runs python only)" % str(language)[:100])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dsec-code-interpreter/1"

    def log_message(self, fmt, *args):
        pass

    # -- helpers --------------------------------------------------------------

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return {}
        try:
            j = json.loads(raw)
        except ValueError:
            raise BadRequest(400, "request body is not JSON")
        if not isinstance(j, dict):
            raise BadRequest(400, "request body is not a JSON object")
        return j

    def reply(self, status, body=b"", ctype="text/plain; charset=utf-8"):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if status != 204:
            self.wfile.write(body)

    def reply_json(self, obj):
        self.reply(200, json.dumps(obj), "application/json")

    def context_of(self, cid):
        ctx = CONTEXTS.get(cid)
        if ctx is None:
            raise BadRequest(404, "context %s not found" % str(cid)[:100])
        return ctx

    def route(self, method):
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        try:
            if method == "GET" and parts == ["health"]:
                return self.reply(200, "OK")
            if method == "POST" and parts == ["execute"]:
                return self.execute(self.body())
            if parts[:1] == ["contexts"]:
                if method == "POST" and len(parts) == 1:
                    b = self.body()
                    check_language(b.get("language"))
                    cwd = b.get("cwd")
                    if cwd is not None and (not isinstance(cwd, str) or not os.path.isdir(cwd)):
                        raise BadRequest(400, "cwd %r is not a directory" % (cwd,))
                    return self.reply_json(CONTEXTS.create("python", cwd).describe())
                if method == "GET" and len(parts) == 1:
                    return self.reply_json([c.describe() for c in CONTEXTS.all()])
                if method == "DELETE" and len(parts) == 2:
                    ctx = self.context_of(parts[1])
                    CONTEXTS.remove(ctx.id)
                    with ctx.lock:
                        ctx.stop()
                    return self.reply(204)
                if method == "POST" and len(parts) == 3 and parts[2] == "restart":
                    ctx = self.context_of(parts[1])
                    with ctx.lock:
                        ctx.restart()
                    return self.reply(204)
            raise BadRequest(404, "no route %s %s" % (method, path[:200]))
        except BadRequest as e:
            self.reply(e.status, str(e))

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_DELETE(self):
        self.route("DELETE")

    # -- /execute -------------------------------------------------------------

    def execute(self, b):
        code = b.get("code")
        if not isinstance(code, str):
            raise BadRequest(400, "execute: \"code\" must be a string")
        language, cid = b.get("language"), b.get("context_id")
        check_language(language)
        env_vars = b.get("env_vars") or {}
        if not isinstance(env_vars, dict):
            raise BadRequest(400, "execute: \"env_vars\" must be an object")
        timeout = b.get("timeout")
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
            raise BadRequest(400, "execute: \"timeout\" must be a number of seconds >= 0")
        ctx = self.context_of(cid) if cid else CONTEXTS.default_context()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.flush()
        gone = [False]

        def emit(msg):
            if gone[0]:
                return
            data = (json.dumps(msg) + "\n").encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            except OSError:
                gone[0] = True

        def hung_up():
            if gone[0]:
                return True
            try:
                r, _, _ = select.select([self.connection], [], [], 0)
                if r and self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    gone[0] = True
            except BlockingIOError:
                pass
            except OSError:
                gone[0] = True
            return gone[0]

        with ctx.lock:
            if ctx.proc is None:  # removed while we waited
                emit({"type": "error", "name": "ContextNotFound",
                      "value": "context %s was removed" % ctx.id, "traceback": ""})
            else:
                ctx.run(code, env_vars, timeout, emit, hung_up)
                emit({"type": "number_of_executions", "execution_count": ctx.count})
            emit({"type": "end_of_execution"})
        if not gone[0]:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass
        else:
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global CONTEXTS
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # Bind first: the port is the readiness signal clients wait for, and the
    # default context's worker starts while they connect.
    server = Server((HOST, PORT), Handler)
    CONTEXTS = Contexts()

    def stop(*_):
        for c in CONTEXTS.all():
            c.stop()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    # The readiness line: the node answers the sandbox's create once it
    # reads it (actors/sandbox_start.hpp).
    print(f"listening on {HOST}:{PORT}", flush=True)
    try:
        server.serve_forever()
    finally:
        for c in CONTEXTS.all():
            c.stop()


if __name__ == "__main__":
    main()
