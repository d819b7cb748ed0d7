# The E2B API: the unmodified `e2b` package from the npm registry (2.x, the
# newest; at least 2.50) drives real dsec nodes, with only its two URLs
# pointed at a node. The JS scripts in test/e2e/e2b/ are plain E2B code and
# assert what they get; this file installs the package with Debian's nodejs
# and npm (cached between runs in $DSEC_NPM_CACHE, default
# /var/cache/dsec-npm), starts nodes with an API key file, runs the scripts,
# and checks the rest from outside: the same sandbox through the native API,
# a second node of a cluster, API keys on REST and E2B, and hostile envd
# requests that must get 4xx answers and leave the node serving.

import json
import os
import shutil
import struct
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from dsec_harness import Client, Node, _finish_node, wait_for

SCRIPTS = Path(__file__).resolve().parent / "e2b"
NPM_CACHE = Path(os.environ.get("DSEC_NPM_CACHE", "/var/cache/dsec-npm"))
API_KEY = "e2b_dsec_test_key_0123456789abcdef"
MIN_VERSION = (2, 50, 0)
# Reinstall (to test the newest 2.x) when the cached copy is older than this.
REFRESH_S = 24 * 3600
JOIN_WAIT_S = 30


def _version(pkg_dir):
    try:
        v = json.loads((pkg_dir / "package.json").read_text())["version"]
        return tuple(int(x) for x in v.split("-")[0].split("."))
    except (OSError, ValueError, KeyError):
        return None


def _npm_install(root):
    root.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        ["npm", "install", "--no-package-lock", "--no-save", "--no-audit", "--no-fund",
         "--loglevel=error", "e2b@2"],
        cwd=root, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def e2b_module():
    """dist/index.mjs of the newest e2b 2.x, installed once and cached."""
    for tool in ("node", "npm"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing: install Debian's nodejs and npm "
                        "(bash scripts/deps.sh does)", pytrace=False)
    pkg = NPM_CACHE / "node_modules" / "e2b"
    stamp = NPM_CACHE / ".installed"
    fresh = stamp.exists() and time.time() - stamp.stat().st_mtime < REFRESH_S
    if not (fresh and _version(pkg)):
        p = _npm_install(NPM_CACHE)
        if p.returncode == 0:
            stamp.touch()
        elif not _version(pkg):
            ping = subprocess.run(["npm", "ping"], capture_output=True, text=True, timeout=120)
            if ping.returncode != 0:
                pytest.skip("the npm registry is unreachable and no e2b package is cached in "
                            f"{NPM_CACHE}: {ping.stderr.strip()[-300:]}")
            pytest.fail(f"npm install e2b@2 failed: {p.stderr[-2000:]}", pytrace=False)
    version = _version(pkg)
    assert version and version >= MIN_VERSION, f"e2b {version} is older than 2.50"
    return str(pkg / "dist" / "index.mjs")


class KeyedClient(Client):
    """The REST client with the node's API key on every call."""

    def raw(self, method, path, body=None, headers=None, timeout=None):
        h = {"X-API-Key": API_KEY}
        h.update(headers or {})
        return super().raw(method, path, body, headers=h, timeout=timeout)


def keyed_node(dsec_bin, store, key_file, extra=()):
    n = Node(dsec_bin, store, extra_args=["--api-key-file", str(key_file), *extra])
    n.client = KeyedClient("127.0.0.1", n.rest_port)
    return n.start()


@pytest.fixture(scope="module")
def key_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("keys") / "api-keys"
    p.write_text(f"# dsec e2e\n{API_KEY}\n")
    return p


@pytest.fixture(scope="module")
def e2b_node(dsec_bin, store, key_file, e2b_base):
    n = keyed_node(dsec_bin, store, key_file)
    yield n
    _finish_node(n)


def run_js(module, node, script, timeout=600, **env):
    """Runs test/e2e/e2b/<script>.mjs against `node`; returns its last JSON line."""
    url = f"http://127.0.0.1:{node.rest_port}"
    full = dict(os.environ, E2B_MODULE=module, E2B_API_URL=url, E2B_SANDBOX_URL=url,
                E2B_API_KEY=API_KEY, E2B_TEMPLATE=env.pop("template", "base"),
                HOST_ONLY_FILE=node.log_path, **env)
    p = subprocess.run(["node", str(SCRIPTS / f"{script}.mjs")], env=full, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, (f"{script}.mjs exit {p.returncode}:\n{p.stdout[-3000:]}\n"
                               f"{p.stderr[-5000:]}\n--- node log ---\n{node.log_tail(60)}")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1])


# -- the SDK against one node ----------------------------------------------------------


def test_commands(e2b_module, e2b_node):
    out = run_js(e2b_module, e2b_node, "commands")
    assert out["ok"]


def test_commands_on_a_layer_without_bash(e2b_module, e2b_node):
    """busybox has no /bin/bash: the SDK's `/bin/bash -l -c` runs with /bin/sh."""
    out = run_js(e2b_module, e2b_node, "commands", template="busybox")
    assert out["ok"]


def test_files(e2b_module, e2b_node):
    assert run_js(e2b_module, e2b_node, "files")["ok"]


def test_pushed_output_two_handles_and_watch_events(e2b_module, e2b_node):
    """onStdout streams, a late Connect gets what it missed, watchDir uses inotify."""
    assert run_js(e2b_module, e2b_node, "push")["ok"]


def test_lifecycle_list_pause_connect_kill(e2b_module, e2b_node):
    assert run_js(e2b_module, e2b_node, "lifecycle")["ok"]


def test_an_e2b_sandbox_is_a_dsec_sandbox(e2b_module, e2b_node):
    out = run_js(e2b_module, e2b_node, "create")
    assert out["stdout"] == "made\n"
    c = e2b_node.client
    status, info = c.get(out["id"])
    assert status == 200, info
    assert info["state"] == "running"
    assert info["node"] == e2b_node.node_id
    assert info["layers"] == ["base/e2b@1", "toolkit/e2b-sudo@1"]
    assert info["labels"]["from"] == "e2b"
    # The native API drives it too, and the E2B side sees the result.
    assert c.sh(out["id"], "echo native > /tmp/n; cat /tmp/n")["stdout"] == "native\n"
    status, body = c.raw("GET", "/sandboxes/" + urllib.parse.quote(out["id"], safe=""))[::2]
    assert status == 200 and json.loads(body)["metadata"] == {"from": "e2b"}
    # The E2B command is in the sandbox's trajectory log like any exec: its
    # start (background, the way envd runs it) and its exit.
    status, _, data = c.raw("GET", f"/v1/sandboxes/{urllib.parse.quote(out['id'], safe='')}/trajectory")
    assert status == 200
    recs = [json.loads(line) for line in data.decode().splitlines() if line]
    exits = [r for r in recs if r["kind"] == "exit"]
    assert any(r["stdout"].get("text") == "made\n" for r in exits), recs
    assert any(r["kind"] == "exec" and r.get("background") for r in recs), recs
    status, _ = c.delete(out["id"])
    assert status == 200
    status, _, _ = c.raw("GET", "/sandboxes/" + urllib.parse.quote(out["id"], safe=""))
    assert status == 404


def test_a_store_alias_names_a_template(dsec_bin, e2b_node, store):
    """`dsec layer alias NAME REF` names a templateID; it wins over the built-in ones."""
    name = "t-" + os.urandom(4).hex()

    def alias(*words):
        return subprocess.run([dsec_bin, "layer", "alias", *words, "--store", store],
                              capture_output=True, text=True, timeout=60)

    c = e2b_node.client
    p = alias(name, "base/busybox@1")
    assert p.returncode == 0, p.stderr
    try:
        assert f"{name}\tbase/busybox@1" in alias().stdout
        assert json.loads(alias("--json").stdout)[name] == "base/busybox@1"
        status, body = c.call("POST", "/sandboxes", {"templateID": name})
        assert status == 201, body
        status, info = c.get(body["sandboxID"])
        assert status == 200 and info["layers"] == ["base/busybox@1"], info
        assert info["labels"]["e2b.template"] == name, info
        c.delete(body["sandboxID"])
        # Bad input: a CLI message and exit 1 (2 for usage), the file unchanged.
        p = alias("bad/name", "base/busybox@1")
        assert p.returncode == 1 and "[a-z0-9._-]" in p.stderr, p.stderr
        p = alias(name + "x", "nosuch/layer@9")
        assert p.returncode == 1 and "not_found" in p.stderr, p.stderr
        p = alias(name + "x", "--rm")
        assert p.returncode == 1 and "no such alias" in p.stderr, p.stderr
        assert alias("a", "b", "c").returncode == 2
        assert alias(name, "base/busybox@1", "--rm").returncode == 2
    finally:
        assert alias(name, "--rm").returncode == 0
    assert name not in alias().stdout
    status, body = c.call("POST", "/sandboxes", {"templateID": name})
    assert status == 404 and "dsec layer alias" in body["message"], body


# -- API keys -----------------------------------------------------------------------------


def test_api_keys_guard_rest_and_e2b(e2b_module, e2b_node):
    assert run_js(e2b_module, e2b_node, "auth")["ok"]
    plain = Client("127.0.0.1", e2b_node.rest_port)
    status, body = plain.call("GET", "/v1/sandboxes")
    assert status == 401 and body["error"]["code"] == "unauthenticated", body
    status, body = plain.call("POST", "/v1/sandboxes", {"layers": ["base/busybox@1"]})
    assert status == 401
    status, _ = plain.call("GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + API_KEY})
    assert status == 200
    status, body = plain.call("GET", "/v2/sandboxes", headers={"X-API-Key": "wrong" * 4})
    assert status == 401 and body["code"] == 401, body
    # envd calls need the sandbox's access token (or a key).
    c = e2b_node.client
    status, sb = c.call("POST", "/v2/sandboxes", {"templateID": "busybox"})
    assert status == 201 and sb["envdAccessToken"], sb
    sid = sb["sandboxID"]
    try:
        envd = {"E2b-Sandbox-Id": sid, "Content-Type": "application/json"}
        status, body = plain.call("POST", "/process.Process/List", {}, headers=envd)
        assert status == 401 and body["code"] == "unauthenticated", body
        status, body = plain.call("POST", "/process.Process/List", {},
                                  headers=dict(envd, **{"X-Access-Token": "0" * 64}))
        assert status == 401
        status, body = plain.call("POST", "/process.Process/List", {},
                                  headers=dict(envd, **{"X-Access-Token": sb["envdAccessToken"]}))
        assert status == 200 and body == {"processes": []}, body
    finally:
        c.delete(sid)


def test_a_reachable_rest_address_needs_keys_or_insecure(dsec_bin, store, tmp_path):
    p = subprocess.run([dsec_bin, "node", "--state-dir", str(tmp_path / "s"), "--store", store,
                        "--rest", "0.0.0.0:0", "--listen", "127.0.0.1:0", "--zram-mb", "0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "--api-key-file" in p.stderr and "--insecure" in p.stderr, p.stderr
    bad = tmp_path / "short"
    bad.write_text("short\n")
    p = subprocess.run([dsec_bin, "node", "--state-dir", str(tmp_path / "s"), "--store", store,
                        "--api-key-file", str(bad), "--listen", "127.0.0.1:0", "--zram-mb", "0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "shorter than 16" in p.stderr, p.stderr


# -- hostile envd requests ----------------------------------------------------------------


def envelope(payload, flags=0):
    return struct.pack(">BI", flags, len(payload)) + payload


def test_hostile_envd_requests_get_4xx(e2b_node):
    c = e2b_node.client
    status, sb = c.call("POST", "/v2/sandboxes", {"templateID": "busybox"})
    assert status == 201, sb
    sid = sb["sandboxID"]
    h = {"E2b-Sandbox-Id": sid}
    stream = dict(h, **{"Content-Type": "application/connect+json"})
    unary = dict(h, **{"Content-Type": "application/json"})

    def end_error(body):
        """The error of a stream's end-of-stream envelope."""
        assert body[0] == 2, body[:50]
        (n,) = struct.unpack(">I", body[1:5])
        return json.loads(body[5:5 + n])["error"]

    try:
        start = b'{"process":{"cmd":"/bin/sh","args":["-c","echo hi"]}}'
        for body in [b"", b"\x00\x00", envelope(start)[:-3], envelope(start, flags=1),
                     b"\x00\xff\xff\xff\xff" + start, envelope(b"{not json"),
                     envelope(b'{"process":{"cmd":""}}'), envelope(b'{"process":{"cmd":5}}')]:
            status, _, out = c.raw("POST", "/process.Process/Start", body, headers=stream)
            assert status == 200, (body, out)
            assert end_error(out)["code"] == "invalid_argument", (body, out)
        status, _, out = c.raw("POST", "/process.Process/Start", envelope(start),
                               headers=dict(h, **{"Content-Type": "text/plain"}))
        assert end_error(out)["code"] == "invalid_argument"
        for path, body in [
            ("/filesystem.Filesystem/Stat", b"[1,2"),
            ("/filesystem.Filesystem/Stat", b'{"path":"/../../etc"}'),
            ("/filesystem.Filesystem/ListDir", b'{"path":"/","depth":1000}'),
            ("/filesystem.Filesystem/Remove", b'{"path":"/"}'),
            ("/filesystem.Filesystem/Move", b'{"source":"/etc","destination":"/../../x"}'),
            ("/filesystem.Filesystem/MakeDir", b'{"path":"' + b"a/" * 3000 + b'"}'),
            ("/process.Process/SendSignal", b'{"process":{"pid":1},"signal":"SIGNAL_SIGKILL"}'),
            ("/process.Process/SendSignal", b'{"process":{"pid":-4},"signal":9}'),
        ]:
            status, _, out = c.raw("POST", path, body, headers=unary)
            assert 400 <= status < 500, (path, body, status, out)
        status, _, out = c.raw("POST", "/process.Process/Connect",
                               envelope(b'{"process":{"pid":424242}}'), headers=stream)
        assert end_error(out)["code"] == "not_found", out
        status, _, out = c.raw("POST", "/process.Process/Nope", b"{}", headers=unary)
        assert status == 404
        for q in ["path=../../etc/shadow", "path=" + urllib.parse.quote(e2b_node.log_path),
                  "path=%00", "path=%zz", ""]:
            status, _, out = c.raw("GET", "/files?" + q, headers=h)
            assert 400 <= status < 500, (q, status, out)
        status, _, out = c.raw("POST", "/files?path=/tmp/x", b"--b\r\nbroken",
                               headers=dict(h, **{"Content-Type": "multipart/form-data; boundary=b"}))
        assert status == 400, out
        status, _, out = c.raw("GET", "/files?path=/tmp", headers=h)
        assert status == 400, out  # a directory
        status, _, out = c.raw("GET", "/files?path=/x", headers={"E2b-Sandbox-Id": "nobody.x"})
        assert status == 404, out
        status, _, out = c.raw("GET", "/health", headers=dict(h, **{"E2b-Sandbox-Port": "8080"}))
        assert status == 502, out
        # Still serving, the sandbox too.
        assert c.sh(sid, "echo alive")["stdout"] == "alive\n"
    finally:
        c.delete(sid)


# -- a cluster -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def e2b_cluster(dsec_bin, store, key_file):
    first = keyed_node(dsec_bin, store, key_file)
    nodes = [first]
    try:
        nodes.append(keyed_node(dsec_bin, store, key_file,
                                ["--join", f"127.0.0.1:{first.listen_port}"]))

        def alive_members(n):
            status, body = n.client.call("GET", "/v1/nodes")
            return {m["id"] for m in body.get("nodes", body if isinstance(body, list) else [])
                    if m.get("state") == "alive"} if status == 200 else set()
        ids = {n.node_id for n in nodes}
        for n in nodes:
            wait_for(lambda: alive_members(n) >= ids, JOIN_WAIT_S, what="the cluster to form")
        yield nodes
    finally:
        for n in nodes:
            if n.alive():
                _finish_node(n)
            else:
                n.remove_state()


def test_any_peer_answers_for_any_sandbox(e2b_module, e2b_cluster):
    a, b = e2b_cluster
    made = run_js(e2b_module, a, "create")
    assert made["id"].startswith(a.node_id + ".")
    out = run_js(e2b_module, b, "drive", SANDBOX_ID=made["id"], KILL="1")
    assert out["stdout"].startswith("via ")
    assert out["killed"] is True
    status, _ = a.client.get(made["id"])
    assert status == 404


def test_cli_sends_the_api_key(dsec_bin, e2b_node):
    env = dict(os.environ, DSEC_REST=e2b_node.rest)
    env.pop("DSEC_API_KEY", None)
    p = subprocess.run([dsec_bin, "ls"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "API key" in p.stderr, (p.returncode, p.stderr)
    p = subprocess.run([dsec_bin, "ls"], env=dict(env, DSEC_API_KEY=API_KEY), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    # Every client verb sends it: the trajectory and job verbs too.
    sid = e2b_node.client.create_ok(memory_mb=128, labels={"job": "keyed"})
    keyed = dict(env, DSEC_API_KEY=API_KEY)
    for words in (["trajectory", sid], ["pause", "--label", "job=keyed"],
                  ["resume", "--label", "job=keyed"], ["replay", sid]):
        p = subprocess.run([dsec_bin, *words], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 1 and "API key" in p.stderr, (words, p.returncode, p.stderr)
        if words[0] == "replay":
            continue  # not made twice
        p = subprocess.run([dsec_bin, *words], env=keyed, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, (words, p.stderr)
    e2b_node.client.delete(sid)
