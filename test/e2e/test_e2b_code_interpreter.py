# The unmodified @e2b/code-interpreter npm SDK (2.x) against a dsec node, with
# only E2B_API_URL and E2B_SANDBOX_URL pointed at it (test/e2e/e2b/
# code_interpreter.mjs). The SDK reaches the interpreter's port 49999 by
# E2B's client-proxy headers (E2b-Sandbox-Id, E2b-Sandbox-Port) on the REST
# port: the port proxy of issue 26 part 3. Until a node routes those, the
# test skips, saying so; it never skips for another reason.

import json
import os
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from dsec_harness import _finish_node
from test_e2b import API_KEY, NPM_CACHE, REFRESH_S, keyed_node, key_file  # noqa: F401

SCRIPTS = Path(__file__).resolve().parent / "e2b"
INSTALL = NPM_CACHE / "code-interpreter"


def _version(pkg_dir):
    try:
        v = json.loads((pkg_dir / "package.json").read_text())["version"]
        return tuple(int(x) for x in v.split("-")[0].split("."))
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="session")
def interp_module():
    """dist/index.mjs of the newest @e2b/code-interpreter 2.x, cached."""
    for tool in ("node", "npm"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing: install Debian's nodejs and npm "
                        "(bash scripts/deps.sh does)", pytrace=False)
    pkg = INSTALL / "node_modules" / "@e2b" / "code-interpreter"
    stamp = INSTALL / ".installed"
    fresh = stamp.exists() and time.time() - stamp.stat().st_mtime < REFRESH_S
    if not (fresh and _version(pkg)):
        INSTALL.mkdir(parents=True, exist_ok=True)
        # Its own project root: npm would otherwise install into the e2b
        # cache's node_modules one directory up.
        (INSTALL / "package.json").write_text('{"private": true}\n')
        p = subprocess.run(["npm", "install", "--no-package-lock", "--no-save", "--no-audit",
                            "--no-fund", "--loglevel=error", "@e2b/code-interpreter@2"],
                           cwd=INSTALL, capture_output=True, text=True, timeout=600)
        if p.returncode == 0:
            stamp.touch()
        elif not _version(pkg):
            ping = subprocess.run(["npm", "ping"], capture_output=True, text=True, timeout=120)
            if ping.returncode != 0:
                pytest.skip("the npm registry is unreachable and no @e2b/code-interpreter is "
                            f"cached in {INSTALL}: {ping.stderr.strip()[-300:]}")
            pytest.fail(f"npm install @e2b/code-interpreter@2 failed: {p.stderr[-2000:]}",
                        pytrace=False)
    version = _version(pkg)
    assert version and version >= (2, 0, 0), f"@e2b/code-interpreter {version} is not 2.x"
    return str(pkg / "dist" / "index.mjs")


@pytest.fixture(scope="module")
def interp_node(dsec_bin, store, key_file):  # noqa: F811
    n = keyed_node(dsec_bin, store, key_file)
    yield n
    _finish_node(n)


def _proxy_routes(node):
    """Whether the node routes E2B's client-proxy headers to port 49999: asks
    the interpreter's GET /contexts (a route only it has; envd has none) in a
    code-interpreter-v1 sandbox that way. (False, answer) if the route is missing."""
    c = node.client
    status, body = c.call("POST", "/sandboxes", {"templateID": "code-interpreter-v1"})
    assert status == 201, body
    sid = body["sandboxID"]
    try:
        deadline = time.monotonic() + 60
        while True:
            status, _, data = c.raw("GET", "/contexts",
                                    headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999"})
            # 404/501, or the 502 of a node without the port proxy ("dsec
            # serves only envd (port 49983)"): the route is not there.
            if status in (404, 501) or (status == 502 and b"serves only envd" in data):
                return False, f"{status} {data[:200]!r}"
            if status == 200:
                assert isinstance(json.loads(data), list), data
                return True, ""
            assert time.monotonic() < deadline, f"port 49999 answered {status} {data[:300]!r}"
            time.sleep(0.5)  # 502 while the server starts
    finally:
        c.call("DELETE", "/sandboxes/" + urllib.parse.quote(sid, safe=""))


def test_unmodified_code_interpreter_sdk(interp_module, interp_node):
    routed, answer = _proxy_routes(interp_node)
    if not routed:
        pytest.skip("needs the port proxy (E2b-Sandbox-Port routing): the node answered "
                    + answer)
    url = f"http://127.0.0.1:{interp_node.rest_port}"
    env = dict(os.environ, E2B_MODULE=interp_module, E2B_API_URL=url, E2B_SANDBOX_URL=url,
               E2B_API_KEY=API_KEY)
    p = subprocess.run(["node", str(SCRIPTS / "code_interpreter.mjs")], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (f"code_interpreter.mjs exit {p.returncode}:\n{p.stdout[-3000:]}\n"
                               f"{p.stderr[-5000:]}\n--- node log ---\n{interp_node.log_tail(60)}")
    out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    assert out["ok"]
