"""A "team mirror" peer for egress tests (issue 29): its own network namespace
behind a host veth, with two addresses, dnsmasq serving its own names (and
logging every query it receives) and an HTTP server on port 80 that answers
with the Host header it got. Used by test/e2e/test_egress.py and
test/security/test_dns_tunnel.py; needs root, iproute2 and dnsmasq
(dnsmasq-base, scripts/deps.sh).

Names (all under mirror.test, which only this dnsmasq knows):
  pypi.mirror.test   A  .2   (the "pypi" source)
  npm.mirror.test    A  .3   (the "npm" source)
  alias.mirror.test  CNAME pypi.mirror.test
  ghost.mirror.test  nothing (the "ghost" source never resolves)
  big.mirror.test    60 A records (the "big" source: answers over 512 bytes)
  *.slow.mirror.test forwarded to a server that never answers (`silent`): a
                     slow upstream; the node's queries for them time out
"""
import json
import os
import random
import shutil
import subprocess
import tempfile
import textwrap
import time

# A DNS server that reads every query and never answers.
SILENT = "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n" \
         "s.bind((sys.argv[1], 53))\nwhile True:\n    s.recv(4096)\n"

# HTTP on 80 and HTTPS on 443 (argv: cert, key): GET / answers with the Host
# header it got; GET /bytes/N answers N bytes (for the bench).
HTTP = textwrap.dedent("""
    import http.server, socketserver, ssl, sys, threading
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"
        def do_GET(self):
            if self.path.startswith("/bytes/"):
                n = int(self.path[7:])
                self.send_response(200); self.send_header("Content-Length", str(n)); self.end_headers()
                chunk = b"x" * 65536
                while n > 0:
                    self.wfile.write(chunk[:min(n, len(chunk))]); n -= len(chunk)
                return
            body = ("host=" + str(self.headers.get("Host"))).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body)))
            self.end_headers(); self.wfile.write(body)
        def log_message(self, *a): pass
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.daemon_threads = True
    plain = socketserver.ThreadingTCPServer(("0.0.0.0", 80), H)
    tls = socketserver.ThreadingTCPServer(("0.0.0.0", 443), H)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    tls.serve_forever()
""")


def sh(cmd):
    return subprocess.run(cmd, shell=True, check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT).stdout.decode()


class MirrorPeer:
    def __init__(self):
        if not shutil.which("dnsmasq"):
            raise RuntimeError("dnsmasq is not installed (apt-get install dnsmasq-base)")
        self.k = random.randint(20, 250)
        tag = f"{os.getpid() % 10000}{self.k}"
        self.ns = f"eg-{tag}"
        self.host_if = f"egh{tag}"
        self.host_addr = f"10.124.{self.k}.1"
        self.pypi = f"10.124.{self.k}.2"
        self.npm = f"10.124.{self.k}.3"
        self.silent = f"10.124.{self.k}.254"
        self.dir = tempfile.mkdtemp(prefix="dsec-egress-peer-")
        self.query_log = os.path.join(self.dir, "dnsmasq.log")
        self.procs = []
        sh(f"ip netns add {self.ns}")
        sh(f"ip link add {self.host_if} type veth peer name eth0 netns {self.ns}")
        sh(f"ip addr add {self.host_addr}/24 dev {self.host_if} && ip link set {self.host_if} up")
        sh(f"nsenter --net=/run/netns/{self.ns} sh -c 'ip addr add {self.pypi}/24 dev eth0 && "
           f"ip addr add {self.npm}/24 dev eth0 && ip addr add {self.silent}/24 dev eth0 && "
           f"ip link set eth0 up && ip link set lo up && "
           f"ip route add default via {self.host_addr}'")
        self.procs.append(subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.ns}", "--", "dnsmasq", "--no-daemon",
             "--no-resolv", "--no-hosts", "--log-queries", f"--log-facility={self.query_log}",
             f"--listen-address={self.pypi}", "--bind-interfaces", "--port=53",
             f"--pid-file={self.dir}/dnsmasq.pid", "--user=root",
             f"--host-record=pypi.mirror.test,{self.pypi}",
             f"--host-record=npm.mirror.test,{self.npm}",
             "--cname=alias.mirror.test,pypi.mirror.test",
             # 60 addresses: more than 512 bytes, so UDP without EDNS0 is truncated
             *[f"--host-record=big.mirror.test,10.124.{self.k}.{100 + i}" for i in range(60)],
             "--local=/mirror.test/", f"--server=/slow.mirror.test/{self.silent}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.procs.append(subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.ns}", "--", "/usr/bin/python3", "-c", SILENT,
             self.silent]))
        cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
        sh(f"openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=pypi.mirror.test "
           f"-addext subjectAltName=DNS:pypi.mirror.test,DNS:npm.mirror.test "
           f"-keyout {key} -out {cert} 2>/dev/null")
        self.procs.append(subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.ns}", "--", "/usr/bin/python3", "-c", HTTP,
             cert, key]))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out = sh(f"nsenter --net=/run/netns/{self.ns} ss -ltnu")
            if ":53 " in out and ":80 " in out and ":443 " in out \
                    and f"{self.silent}:53 " in out:
                return
            time.sleep(0.05)
        self.close()
        raise AssertionError("mirror peer: dnsmasq or the HTTP server did not start")

    @property
    def upstream(self):
        return f"{self.pypi}:53"

    def sources(self, path):
        """Writes the node's --egress-sources file; returns its path."""
        with open(path, "w") as f:
            json.dump({"pypi": ["pypi.mirror.test:80", "pypi.mirror.test:443"],
                       "npm": ["npm.mirror.test:80"],
                       "alias": ["alias.mirror.test:80"], "ghost": ["ghost.mirror.test:80"],
                       "big": ["big.mirror.test:80"]},
                      f, indent=2)
        return path

    def queries(self):
        """Names dnsmasq was asked, in order."""
        try:
            with open(self.query_log, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return []
        out = []
        for l in lines:
            parts = l.split()
            for i, p in enumerate(parts):
                if p.startswith("query[") and i + 1 < len(parts):
                    out.append(parts[i + 1].lower())
        return out

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        subprocess.run(["ip", "link", "del", self.host_if], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", self.ns], stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)


# Runs inside a sandbox: one result per probe.
#   ["resolve", name]              -> sorted addresses or the gaierror name
#   ["http", host, ip]             -> "ok:<body>" (GET / with Host: host), "closed" or errno
#   ["tls", sni, ip]               -> "ok:<body>" over TLS with that SNI, "closed" or errno
#   ["tcp", ip, port]              -> "ok" or the errno name
#   ["dns", server, name, qtype]   -> rcode as "rcode:N", or "timeout" / errno name
PROBE = textwrap.dedent("""
    import errno, json, random, socket, struct, sys
    def en(e): return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
    def query(name, qtype):
        q = struct.pack(">HHHHHH", random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
        for l in name.split("."): q += bytes([len(l)]) + l.encode()
        return q + b"\\0" + struct.pack(">HH", qtype, 1)
    out = []
    for p in json.loads(sys.argv[1]):
        try:
            if p[0] == "resolve":
                try:
                    out.append(sorted({a[4][0] for a in socket.getaddrinfo(p[1], 80, socket.AF_INET)}))
                except socket.gaierror as e:
                    out.append("gaierror")
            elif p[0] == "http":
                s = socket.create_connection((p[2], 80), timeout=5)
                s.sendall(("GET / HTTP/1.0\\r\\nHost: " + p[1] + "\\r\\n\\r\\n").encode())
                data = b""
                while True:
                    d = s.recv(4096)
                    if not d: break
                    data += d
                out.append("ok:" + data.split(b"\\r\\n\\r\\n", 1)[-1].decode() if data else "closed")
            elif p[0] == "tls":
                import ssl
                ctx = ssl.create_default_context(); ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                raw = socket.create_connection((p[2], 443), timeout=5)
                try:
                    s = ctx.wrap_socket(raw, server_hostname=p[1])
                except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
                    out.append("closed"); continue
                s.sendall(("GET / HTTP/1.0\\r\\nHost: " + p[1] + "\\r\\n\\r\\n").encode())
                data = b""
                while True:
                    d = s.recv(4096)
                    if not d: break
                    data += d
                out.append("ok:" + data.split(b"\\r\\n\\r\\n", 1)[-1].decode() if data else "closed")
            elif p[0] == "tcp":
                s = socket.create_connection((p[1], p[2]), timeout=5); s.close(); out.append("ok")
            elif p[0] == "dns":
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
                s.sendto(query(p[2], p[3]), (p[1], 53))
                out.append("rcode:" + str(s.recv(4096)[3] & 15))
            elif p[0] in ("dnsudp", "dnstcp"):  # -> "rcode:N tc:T an:A"
                q = query(p[2], p[3])
                if p[0] == "dnsudp":
                    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
                    s.sendto(q, (p[1], 53)); a = s.recv(65535)
                else:
                    s = socket.create_connection((p[1], 53), timeout=3)
                    s.sendall(struct.pack(">H", len(q)) + q)
                    n = struct.unpack(">H", s.recv(2))[0]; a = b""
                    while len(a) < n: a += s.recv(n - len(a))
                out.append("rcode:%d tc:%d an:%d" % (a[3] & 15, (a[2] >> 1) & 1, a[6] << 8 | a[7]))
        except socket.timeout:
            out.append("timeout")
        except ConnectionResetError:
            out.append("closed")
        except OSError as e:
            out.append(en(e))
    print(json.dumps(out))
""")


def probe(client, sid, probes):
    status, _ = client.put_file(sid, "/tmp/egress_probe.py", PROBE.encode())
    assert status in (200, 201, 204), status
    r = client.sh(sid, ["python3", "/tmp/egress_probe.py", json.dumps(probes)], timeout_s=120)
    assert r["exit_code"] == 0, r
    return json.loads(r["stdout"])


def nameserver(client, sid):
    """The nameserver the sandbox's /etc/resolv.conf names."""
    r = client.sh(sid, ["cat", "/etc/resolv.conf"])
    for l in r["stdout"].splitlines():
        if l.startswith("nameserver"):
            return l.split()[1]
    return None
