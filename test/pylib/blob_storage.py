# Object storage behind a registry, for tests: nginx serving a
# docker-registry's storage directory over plain HTTP on loopback, as S3 or a
# CDN serves the blobs of a registry that redirects blob reads to them
# (Registry(redirect_to=storage.base_url(i))). Ranges and multi-range are
# nginx's own. It listens on several ports so a test can revoke one (every
# request there answers 403, as an expired presigned URL does) and point the
# registry at another. Every request is logged: requests(port) counts them.
#
#   storage = BlobStorage(tmp / "nginx", reg_dir / "storage", ports=2).start()
#   ...; storage.revoke(0); storage.stop()

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from registry import free_port, wait_port


class BlobStorage:
    def __init__(self, workdir, root, ports=1):
        if not shutil.which("nginx"):
            raise RuntimeError("nginx missing: install nginx-light (scripts/deps.sh)")
        self.workdir, self.root = Path(workdir), Path(root)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ports = [free_port() for _ in range(ports)]
        self.revoked = set()
        self.log_path = self.workdir / "access.log"
        self.proc = None

    def base_url(self, i=0):
        return f"http://127.0.0.1:{self.ports[i]}"

    def _write_conf(self):
        servers = []
        for i, port in enumerate(self.ports):
            body = "return 403;" if i in self.revoked else ""
            servers.append(f"  server {{ listen 127.0.0.1:{port}; root {self.root}; "
                           f"location / {{ {body} }} }}")
        conf = self.workdir / "nginx.conf"
        conf.write_text(
            "daemon off;\nuser root;\nmaster_process on;\nworker_processes 1;\n"
            f"pid {self.workdir}/nginx.pid;\nerror_log {self.workdir}/error.log warn;\n"
            "events { worker_connections 256; }\n"
            "http {\n  log_format t '$server_port $status $request_method $uri $http_range';\n"
            f"  access_log {self.log_path} t;\n  sendfile on;\n"
            "  default_type application/octet-stream;\n" + "\n".join(servers) + "\n}\n")
        return conf

    def start(self):
        conf = self._write_conf()
        self.proc = subprocess.Popen(["nginx", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        for port in self.ports:
            wait_port(port)
        return self

    def revoke(self, i):
        """Port i answers 403 to everything from now on (nginx reloads)."""
        self.revoked.add(i)
        self._write_conf()
        os.kill(self.proc.pid, signal.SIGHUP)
        # A reload starts new workers; wait until one answers 403.
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                urllib.request.urlopen(self.base_url(i) + "/probe", timeout=2)
            except urllib.error.HTTPError as e:
                if e.code == 403:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"nginx did not reload to revoke port {self.ports[i]}")

    def requests(self, i=0, status=None):
        """Logged requests on port i (with that status): (status, method,
        uri, range) tuples."""
        out = []
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return out
        for line in lines:
            m = re.match(r"(\d+) (\d+) (\S+) (\S+) ?(.*)", line)
            if m and int(m.group(1)) == self.ports[i] and (
                    status is None or int(m.group(2)) == status):
                out.append((int(m.group(2)), m.group(3), m.group(4), m.group(5)))
        return out

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
