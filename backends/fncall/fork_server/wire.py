# The wire between the node and the fork server (the node's end is
# backends/fncall/fncall_wire.cpp). Both ways: u32 little-endian frame length,
# then fields, each a u32 length + bytes. Request: language, code, stdin,
# timeout_s (ascii), file count (ascii), then path, content pairs. Answers:
# "ready" once the server is up; per call "ack" once the request is read,
# then exit_code, timed_out, truncated, duration_ms, tainted (ascii), stdout,
# stderr, error; then "clean", tainted once the sandbox is reset and the next
# call may come.
import struct


def read_exact(conn, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def read_frame(conn):
    """The fields of the next frame; EOFError once the node has closed."""
    (n,) = struct.unpack("<I", read_exact(conn, 4))
    return fields(read_exact(conn, n))


def fields(payload):
    out, i = [], 0
    while i < len(payload):
        (n,) = struct.unpack_from("<I", payload, i)
        out.append(payload[i + 4:i + 4 + n])
        i += 4 + n
    return out


def frame(parts):
    body = b"".join(struct.pack("<I", len(p)) + p for p in parts)
    return struct.pack("<I", len(body)) + body
