# A real OCI registry for tests and benches: Debian's docker-registry (CNCF
# distribution 2.8) on a free loopback port, with optional htpasswd Basic
# auth, a self-signed TLS certificate, or the Bearer token flow (a tiny token
# server here that signs JWTs with a key whose certificate the registry
# trusts); OCI image layouts made from dicts of files (tar layers gzip, zstd or
# plain, whiteouts, opaque dirs, multi-platform indexes) and seeded with
# skopeo. Standard library, plus python3-jwt/python3-cryptography for the
# token server only.
#
#   with Registry(tmp, auth=("u", "pw"), tls=True) as reg:
#       layout = make_layout(tmp / "img", [Layer({"etc/a": b"x"}, "zstd")])
#       reg.seed(layout, "1", "team/img")        # -> 127.0.0.1:PORT/team/img:1
#       reg.write_auth_config(tmp / "cfg.json")  # docker config.json for --registry-auth
#       reg.blob_gets(digest)                    # GETs of one blob, from its log
#
# Everything a Registry starts is stopped by stop() (or leaving the with
# block): the registry process, the token server, a ThrottledProxy.

import base64
import datetime
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REGISTRY_BIN = "/usr/bin/docker-registry"

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = {
    None: "application/vnd.oci.image.layer.v1.tar",
    "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
}


def sha256(data):
    """"sha256:<hex>" of bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0):
    """Waits until something accepts on 127.0.0.1:port; raises on timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def make_self_signed(directory, name="registry"):
    """A self-signed certificate for 127.0.0.1 and localhost (SANs):
    returns (cert.pem, key.pem) paths."""
    directory = Path(directory)
    cert, key = directory / f"{name}-cert.pem", directory / f"{name}-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True)
    return cert, key


# -- image layouts ---------------------------------------------------------------


class Layer:
    """One tar layer: `files` maps a path to bytes/str (a file), None (a
    directory) or ("symlink", target); `whiteouts` lists paths this layer
    deletes (written as .wh.NAME), `opaque` directories it makes opaque
    (.wh..wh..opq); `compression` is "gzip", "zstd" or None."""

    def __init__(self, files, compression="gzip", whiteouts=(), opaque=()):
        self.files, self.compression = files, compression
        self.whiteouts, self.opaque = list(whiteouts), list(opaque)

    def tar(self):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            dirs = set()

            def add_dirs(path):
                parts = path.strip("/").split("/")[:-1]
                for i in range(1, len(parts) + 1):
                    d = "/".join(parts[:i])
                    if d not in dirs:
                        dirs.add(d)
                        ti = tarfile.TarInfo(d)
                        ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 1700000000
                        tf.addfile(ti)

            def entry(path, kind, data=b"", target=""):
                add_dirs(path)
                ti = tarfile.TarInfo(path.strip("/"))
                ti.mtime = 1700000000
                if kind == "d":
                    ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                    dirs.add(path.strip("/"))
                    tf.addfile(ti)
                elif kind == "l":
                    ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, target, 0o777
                    tf.addfile(ti)
                else:
                    ti.type, ti.size, ti.mode = tarfile.REGTYPE, len(data), 0o644
                    tf.addfile(ti, io.BytesIO(data))

            for d in self.opaque:
                entry(d, "d")
                entry(d.rstrip("/") + "/.wh..wh..opq", "f")
            for path, v in self.files.items():
                if v is None:
                    entry(path, "d")
                elif isinstance(v, tuple) and v[0] == "symlink":
                    entry(path, "l", target=v[1])
                else:
                    entry(path, "f", v.encode() if isinstance(v, str) else v)
            for w in self.whiteouts:
                head, _, base = w.strip("/").rpartition("/")
                entry((head + "/" if head else "") + ".wh." + base, "f")
        return buf.getvalue()

    def blob(self):
        """(media type, compressed bytes, diff_id of the plain tar)."""
        raw = self.tar()
        if self.compression == "gzip":
            data = gzip.compress(raw, mtime=0)
        elif self.compression == "zstd":
            data = subprocess.run(["zstd", "-q", "-c"], input=raw, check=True,
                                  capture_output=True).stdout
        else:
            data = raw
        return MT_LAYER[self.compression], data, sha256(raw)


def _put_blob(layout, data):
    digest = sha256(data)
    path = Path(layout) / "blobs" / "sha256" / digest.split(":", 1)[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def _image_manifest(layout, layers, config, arch="amd64", os_="linux"):
    descs, diff_ids = [], []
    for layer in layers:
        mt, data, diff_id = layer.blob()
        descs.append({"mediaType": mt, "digest": _put_blob(layout, data), "size": len(data)})
        diff_ids.append(diff_id)
    cfg = {"architecture": arch, "os": os_, "config": config or {},
           "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    cfg_bytes = json.dumps(cfg, sort_keys=True).encode()
    manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST,
                "config": {"mediaType": MT_CONFIG, "digest": _put_blob(layout, cfg_bytes),
                           "size": len(cfg_bytes)},
                "layers": descs}
    body = json.dumps(manifest, sort_keys=True).encode()
    return {"mediaType": MT_MANIFEST, "digest": _put_blob(layout, body), "size": len(body),
            "platform": {"architecture": arch, "os": os_}}, manifest


def _write_index(layout, entry, tag):
    layout = Path(layout)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    entry = dict(entry)
    entry["annotations"] = {"org.opencontainers.image.ref.name": tag}
    (layout / "index.json").write_text(json.dumps(
        {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [entry]}))


def make_layout(layout, layers, tag="1", config=None):
    """Writes an OCI image layout at `layout` with one linux/amd64 image of
    `layers` (Layer objects, lowest first) and image config `config` (the
    "config" object: {"Env": [...], "WorkingDir": ..., "User": ...}), tagged
    `tag`. Returns {"layout", "tag", "manifest" (dict), "manifest_digest",
    "layer_digests"}."""
    layout = Path(layout)
    layout.mkdir(parents=True, exist_ok=True)
    entry, manifest = _image_manifest(layout, layers, config)
    _write_index(layout, entry, tag)
    return {"layout": layout, "tag": tag, "manifest": manifest,
            "manifest_digest": entry["digest"],
            "layer_digests": [d["digest"] for d in manifest["layers"]]}


def make_index_layout(layout, platforms, tag="1"):
    """An OCI layout whose tag names an image index with one small image per
    (os, architecture) in `platforms`, e.g. [("linux", "arm64")]. Seed it
    with seed(..., all_platforms=True). Returns {"layout", "tag", "index_digest"}."""
    layout = Path(layout)
    layout.mkdir(parents=True, exist_ok=True)
    entries = []
    for os_, arch in platforms:
        entry, _ = _image_manifest(layout, [Layer({f"etc/{arch}": arch}, "gzip")], None,
                                   arch=arch, os_=os_)
        entries.append(entry)
    body = json.dumps({"schemaVersion": 2, "mediaType": MT_INDEX,
                       "manifests": entries}, sort_keys=True).encode()
    digest = _put_blob(layout, body)
    _write_index(layout, {"mediaType": MT_INDEX, "digest": digest, "size": len(body)}, tag)
    return {"layout": layout, "tag": tag, "index_digest": digest}


# -- the registry ------------------------------------------------------------------


class Registry:
    """docker-registry on 127.0.0.1:<free port>, its storage and log in
    `workdir`. auth=(user, password) turns on htpasswd Basic auth;
    token=(user, password) the Bearer token flow through a token server
    started here (anonymous gets a token with no access; wrong credentials a
    401); tls=True serves HTTPS with a self-signed certificate (ca_file).
    Attributes: host ("127.0.0.1:PORT"), port, url, storage, log_path,
    ca_file (TLS only), creds ((user, password) or None). redirect_to (a
    base URL, see blob_storage.py) makes blob GETs redirect to storage."""

    def __init__(self, workdir, auth=None, tls=False, token=None, redirect_to=None):
        self.workdir = Path(workdir)
        # Blob GETs answer 307 to this base URL plus the blob's storage path
        # (distribution's redirect middleware): a registry on object storage.
        self.redirect_to = redirect_to
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.auth, self.tls, self.token = auth, tls, token
        self.creds = auth or token
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = ("https://" if tls else "http://") + self.host
        self.storage = self.workdir / "storage"
        self.log_path = self.workdir / "registry.log"
        self.ca_file = None
        self.proc = None
        self._token_server = None

    # -- lifecycle

    def start(self):
        self.storage.mkdir(exist_ok=True)
        lines = ["version: 0.1", "log:", "  level: info", "  accesslog:", "    disabled: true",
                 "storage:", "  filesystem:", f"    rootdirectory: {self.storage}",
                 "  delete:", "    enabled: true",
                 "http:", f"  addr: {self.host}", f"  secret: {uuid.uuid4().hex}"]
        if self.tls:
            cert, key = make_self_signed(self.workdir)
            self.ca_file = cert
            lines += ["  tls:", f"    certificate: {cert}", f"    key: {key}"]
        if self.auth:
            htpasswd = self.workdir / "htpasswd"
            out = subprocess.run(["htpasswd", "-Bbn", self.auth[0], self.auth[1]], check=True,
                                 capture_output=True, text=True).stdout
            htpasswd.write_text(out.strip() + "\n")
            lines += ["auth:", "  htpasswd:", "    realm: dsec-test", f"    path: {htpasswd}"]
        elif self.token:
            self._token_server = TokenServer(self.workdir, self.token)
            self._token_server.start()
            lines += ["auth:", "  token:", f"    realm: {self._token_server.realm}",
                      f"    service: {TokenServer.service}",
                      f"    issuer: {TokenServer.issuer}",
                      f"    rootcertbundle: {self._token_server.cert}"]
        if self.redirect_to:
            lines += ["middleware:", "  storage:", "    - name: redirect", "      options:",
                      f"        baseurl: {self.redirect_to}"]
        config = self.workdir / "config.yml"
        config.write_text("\n".join(lines) + "\n")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_port(self.port)
        except TimeoutError:
            self.stop()
            raise RuntimeError("docker-registry did not start: " + self.log())
        return self

    def stop(self):
        """Stops the registry (TERM, then KILL after 5 s) and the token server."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self._log.close()
        self.proc = None
        if self._token_server:
            self._token_server.stop()
            self._token_server = None

    def kill(self):
        """SIGKILL, as a crash (the storage stays; start() again to revive)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- content

    def seed(self, layout, tag, repo, dest_tag=None, all_platforms=False, docker_format=False):
        """Copies image `tag` of OCI layout `layout` to repo:dest_tag (default
        tag) with skopeo; all_platforms copies a whole index; docker_format
        converts to Docker schema 2 media types (gzip/plain layers only).
        Returns the reference "HOST/repo:tag"."""
        dest_tag = dest_tag or tag
        cmd = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false"]
        if self.creds:
            cmd += ["--dest-creds", f"{self.creds[0]}:{self.creds[1]}"]
        if all_platforms:
            cmd += ["--all"]
        if docker_format:
            cmd += ["--format", "v2s2"]
        cmd += [f"oci:{layout}:{tag}", f"docker://{self.host}/{repo}:{dest_tag}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"skopeo copy failed: {r.stderr}")
        return f"{self.host}/{repo}:{dest_tag}"

    def push_layout(self, layout, tag, repo, dest_tag=None):
        """Uploads image `tag` of OCI layout `layout` (made by make_layout)
        byte for byte (see push_raw): unlike skopeo, which gzips uncompressed
        layers on the way, the registry then serves exactly the layout's
        blobs and manifest digest. Returns the reference "HOST/repo:tag"."""
        layout = Path(layout)

        def blob(digest):
            return (layout / "blobs" / "sha256" / digest.split(":", 1)[1]).read_bytes()

        index = json.loads((layout / "index.json").read_text())
        entry = next(m for m in index["manifests"]
                     if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
        body = blob(entry["digest"])
        manifest = json.loads(body)
        blobs = [blob(d["digest"]) for d in [manifest["config"]] + manifest["layers"]]
        return self.push_raw(repo, dest_tag or tag, blobs, body, entry["mediaType"])

    def push_raw(self, repo, tag, blobs, manifest, media_type):
        """Uploads `blobs` (bytes, each POST + PUT) and then `manifest`
        (bytes, PUT as `media_type`) to repo:tag through the distribution
        API, anonymous or with Basic auth (not the token flow): a manifest of
        any shape, e.g. a hand-made artifact. Returns "HOST/repo:tag"."""
        import ssl
        import urllib.request
        ctx = ssl._create_unverified_context() if self.tls else None
        headers = {}
        if self.auth:
            headers["Authorization"] = "Basic " + base64.b64encode(
                f"{self.auth[0]}:{self.auth[1]}".encode()).decode()

        def call(method, url, data=None, extra=None):
            req = urllib.request.Request(url, data=data, method=method,
                                         headers={**headers, **(extra or {})})
            with urllib.request.urlopen(req, context=ctx, timeout=60) as r:
                return r.status, r.headers, r.read()

        for data in blobs:
            _, h, _ = call("POST", f"{self.url}/v2/{repo}/blobs/uploads/", b"")
            loc = h["Location"]
            if loc.startswith("/"):
                loc = self.url + loc
            loc += ("&" if "?" in loc else "?") + "digest=" + sha256(data)
            call("PUT", loc, data, {"Content-Type": "application/octet-stream"})
        call("PUT", f"{self.url}/v2/{repo}/manifests/{tag}", manifest,
             {"Content-Type": media_type})
        return f"{self.host}/{repo}:{tag}"

    def blob_data_path(self, digest):
        """The file in the registry's storage that holds blob `digest`
        (overwrite it to test digest checks)."""
        hexd = digest.split(":", 1)[1]
        return (self.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexd[:2]
                / hexd / "data")

    def write_auth_config(self, path, user=None, password=None, style="auth"):
        """Writes a docker config.json for this registry's credentials (or
        the given ones): style "auth" (base64) or "userpass"."""
        user = user if user is not None else self.creds[0]
        password = password if password is not None else self.creds[1]
        if style == "auth":
            entry = {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}
        else:
            entry = {"username": user, "password": password}
        Path(path).write_text(json.dumps({"auths": {self.host: entry}}))
        return Path(path)

    # -- observation

    def log(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def requests(self):
        """Every completed request in the log: dicts with method, uri, status
        and written (response bytes)."""
        out = []
        for line in self.log().splitlines():
            if "response completed" not in line and "response completed with error" not in line:
                continue
            m = re.search(r"http\.request\.method=(\S+)", line)
            u = re.search(r"http\.request\.uri=\"?([^\" ]+)", line)
            s = re.search(r"http\.response\.status=(\d+)", line)
            w = re.search(r"http\.response\.written=(\d+)", line)
            if m and u:
                out.append({"method": m.group(1), "uri": u.group(1),
                            "status": int(s.group(1)) if s else 0,
                            "written": int(w.group(1)) if w else 0})
        return out

    def blob_gets(self, digest):
        """How many GETs of blob `digest` the registry served (2xx or a
        redirect; a 404 does not count)."""
        return sum(1 for r in self.requests()
                   if r["method"] == "GET" and r["uri"].endswith("/blobs/" + digest)
                   and r["status"] in (200, 206, 307))


class TokenServer:
    """The Bearer token flow's other half: GET /token?service=..&scope=..
    answers a JWT (RS256, the certificate in the x5c header) granting the
    scope's actions to `creds` (Basic), nothing to anonymous callers, and
    401 to wrong credentials. Counts its requests in `requests`."""

    service = "dsec-test-registry"
    issuer = "dsec-test-issuer"

    def __init__(self, workdir, creds):
        self.workdir, self.creds = Path(workdir), creds
        self.port = free_port()
        self.realm = f"http://127.0.0.1:{self.port}/token"
        self.requests = 0
        self.cert, self.key = make_self_signed(self.workdir, "token")
        self._httpd = None

    def _issue(self, user, scope):
        import jwt  # python3-jwt
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import Encoding

        access = []
        if user and scope:
            for s in scope.split(" "):
                kind, _, rest = s.partition(":")
                name, _, actions = rest.rpartition(":")
                access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": user or "", "aud": self.service, "exp": now + 300,
                  "nbf": now - 10, "iat": now, "jti": uuid.uuid4().hex, "access": access}
        cert = x509.load_pem_x509_certificate(Path(self.cert).read_bytes())
        x5c = [base64.b64encode(cert.public_bytes(Encoding.DER)).decode()]
        return jwt.encode(claims, Path(self.key).read_bytes(), algorithm="RS256",
                          headers={"x5c": x5c})

    def start(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                from urllib.parse import parse_qs, urlparse
                server.requests += 1
                q = parse_qs(urlparse(self.path).query)
                user = None
                h = self.headers.get("Authorization", "")
                if h.startswith("Basic "):
                    u, _, p = base64.b64decode(h[6:]).decode().partition(":")
                    if (u, p) != tuple(server.creds):
                        self.send_response(401)
                        self.send_header("Content-Type", "application/json")
                        self.end_headers()
                        self.wfile.write(b'{"details":"wrong credentials"}')
                        return
                    user = u
                token = server._issue(user, " ".join(q.get("scope", [])))
                body = json.dumps({"token": token, "expires_in": 300,
                                   "issued_at": datetime.datetime.utcnow().isoformat() + "Z"})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self):
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class ThrottledProxy:
    """A TCP proxy 127.0.0.1:<port> -> `target` ("host:port") that passes at
    most `rate` bytes per second per connection downstream, so a pull of a
    few MB lasts long enough to be interrupted. host is "127.0.0.1:PORT"."""

    def __init__(self, target, rate):
        self.target, self.rate = target, rate
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self._sock = None
        self._stop = threading.Event()

    def start(self):
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", self.port))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self):
        while not self._stop.is_set():
            try:
                c, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            th, _, tp = self.target.rpartition(":")
            try:
                u = socket.create_connection((th, int(tp)))
            except OSError:
                c.close()
                continue
            threading.Thread(target=self._pipe, args=(c, u, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, self.rate), daemon=True).start()

    def _pipe(self, src, dst, rate):
        chunk = 16384
        try:
            while not self._stop.is_set():
                data = src.recv(chunk)
                if not data:
                    break
                dst.sendall(data)
                if rate:
                    time.sleep(len(data) / rate)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def stop(self):
        self._stop.set()
        if self._sock:
            self._sock.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
