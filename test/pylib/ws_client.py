"""A minimal WebSocket client (RFC 6455) for tests and benches of the
terminal route (no third-party package is installed for it): the handshake,
masked frames out, unfragmented or fragmented frames in, ping answered,
close. Blocking, one socket."""

import base64
import hashlib
import json
import os
import socket
import struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class HandshakeError(Exception):
    def __init__(self, status, body):
        super().__init__(f"websocket handshake answered {status}: {body[:300]!r}")
        self.status = status
        self.body = body


class WebSocket:
    def __init__(self, host, port, path, headers=None, timeout=10):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                           f"{extra}\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise HandshakeError(0, self.buf)
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode(errors="replace").split("\r\n")
        status = int(lines[0].split()[1])
        if status != 101:
            hdrs = {ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip()
                    for ln in lines[1:] if ":" in ln}
            n = int(hdrs.get("content-length", "0"))
            while len(self.buf) < n:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                self.buf += chunk
            raise HandshakeError(status, self.buf[:n])
        want = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
        assert any(ln.lower() == f"sec-websocket-accept: {want}".lower() for ln in lines), lines
        self.closed = False

    def _send_frame(self, opcode, data):
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data)) if n < 4096 else \
            (int.from_bytes(data, "big") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "big")
             ).to_bytes(n, "big")
        self.sock.sendall(head + mask + masked)

    def send_binary(self, data: bytes):
        self._send_frame(0x2, bytes(data))

    def send_text(self, text):
        if not isinstance(text, str):
            text = json.dumps(text)
        self._send_frame(0x1, text.encode())

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("websocket closed by the server")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self, timeout=None):
        """(is_text, payload) of the next message; (None, None) after a close.
        socket.timeout when nothing came within `timeout`."""
        self.sock.settimeout(timeout)
        parts, first_op = [], None
        while True:
            b0, b1 = self._read(2)
            op, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            if op == 0x9:  # ping
                self._send_frame(0xA, payload)
                continue
            if op == 0xA:
                continue
            if op == 0x8:
                if not self.closed:
                    self.closed = True
                    try:
                        self._send_frame(0x8, payload[:2])
                    except OSError:
                        pass
                return None, None
            if op != 0:
                first_op = op
            parts.append(payload)
            if b0 & 0x80:
                data = b"".join(parts)
                return (first_op == 0x1), (data.decode() if first_op == 0x1 else data)

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self._send_frame(0x8, struct.pack("!H", 1000))
            except OSError:
                pass
        self.sock.close()
