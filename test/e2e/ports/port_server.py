# A small HTTP server run INSIDE a sandbox by the ports tests and bench
# (python3 of base/python@3.11, stdlib only): plain answers, an echo of the
# request, a streamed answer produced over time, a WebSocket echo and a
# handler that never answers. Usage: python3 port_server.py PORT
import base64
import hashlib
import json
import socketserver
import struct
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY a keep-alive
    # client waits for the delayed ACK (~40 ms) on every request.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def _send(self, status, body, ctype="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self._send(200, b"x" * 10)

    def do_GET(self):
        if self.path.startswith("/stream"):
            return self._stream()
        if self.path == "/ws":
            return self._websocket()
        if self.path == "/hang":
            time.sleep(3600)
            return
        if self.path.startswith("/big?mb="):  # N MiB of a known pattern, written as read
            n = int(self.path.split("=", 1)[1]) << 20
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            block = bytes(range(256)) * 256
            for _ in range(n // len(block)):
                self.wfile.write(block)
            return
        if self.path == "/conn":  # which connection the request came on
            return self._send(200, f"{self.client_address[0]}:{self.client_address[1]}".encode())
        if self.path.startswith("/headers"):
            body = json.dumps({"path": self.path,
                               "headers": {k.lower(): v for k, v in self.headers.items()}})
            return self._send(200, body.encode(), "application/json")
        if self.path.startswith("/close"):  # an HTTP/1.0-style answer: ends at close
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"until close\n")
            self.close_connection = True
            return
        self._send(200, b"hello from the sandbox\n")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self._send(200, self.rfile.read(n), self.headers.get("Content-Type", "text/plain"))

    do_PUT = do_POST

    def _stream(self):
        # /stream?n=5&every=0.4: n NDJSON lines, one every `every` seconds, chunked.
        q = dict(p.split("=", 1) for p in self.path.partition("?")[2].split("&") if "=" in p)
        n, every = int(q.get("n", 5)), float(q.get("every", 0.4))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(n):
            line = (json.dumps({"i": i, "t": time.time()}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
            if i + 1 < n:
                time.sleep(every)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            op, ln = head[0] & 0x0F, head[1] & 0x7F
            if ln == 126:
                ln = struct.unpack(">H", self.rfile.read(2))[0]
            elif ln == 127:
                ln = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(ln)))
            if op == 8:  # close: answer it and stop
                self.wfile.write(b"\x88\x00")
                self.wfile.flush()
                return
            out = bytes([0x80 | op])
            out += bytes([len(data)]) if len(data) < 126 else b"\x7e" + struct.pack(">H", len(data))
            self.wfile.write(out + data)
            self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512


if __name__ == "__main__":
    Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
