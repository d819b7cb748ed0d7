# Dockerfile builds (`dsec layer build --dockerfile`) against a real node, and
# layer exec defaults (ENV, WORKDIR, USER) applied to the sandboxes created
# from the result. The node and the build share a temp store seeded with the
# test store's busybox layer, so build/* step layers never reach the shared
# test store.
#
# What users rely on: every RUN runs in a real sandbox (no network), COPY
# keeps modes, ARG/ENV substitute, the result N@V alone in a spec gives the
# files, env, working directory and user the Dockerfile set; a rebuild is
# all CACHED; a changed COPY source re-runs from that step; a failing RUN
# fails the build with its output and exit code and leaves no sandbox; an
# unsupported instruction is refused naming it and its line.
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from dsec_harness import BUSYBOX, STORE, TMP_ROOT, Node, _finish_node, assert_clean, wait_for

DOCKERFILE = """\
# a comment
FROM base/busybox@1
ARG GREETING=hi
ENV APP_HOME=/srv/app MSG="$GREETING there"
RUN echo base > /base.txt
WORKDIR $APP_HOME
COPY hello.txt tools/ ./
RUN echo "app:x:1234:1234::/home/app:/bin/sh" >> /etc/passwd \\
    && echo "app:x:1234:" >> /etc/group \\
    && echo "$MSG from $(pwd) as $(id -u)" > built.txt
USER app
RUN id -u > /tmp/uid.txt && echo "$GREETING" > /tmp/arg.txt
EXPOSE 8080
"""


def seed_store(path):
    """A store holding the test store's busybox layer (hard links: read only)."""
    os.makedirs(os.path.join(path, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(path, "tmp"), exist_ok=True)
    with open(os.path.join(STORE, "catalog.json")) as f:
        entry = json.load(f)["layers"][BUSYBOX]
    blob = "sha256-" + entry["digest"].split(":")[1] + ".erofs"
    try:
        os.link(os.path.join(STORE, "blobs", blob), os.path.join(path, "blobs", blob))
    except OSError:
        shutil.copyfile(os.path.join(STORE, "blobs", blob), os.path.join(path, "blobs", blob))
    with open(os.path.join(path, "catalog.json"), "w") as f:
        json.dump({"version": 1, "layers": {BUSYBOX: entry}}, f)
    return path


@pytest.fixture(scope="module")
def bnode(dsec_bin, store):
    root = tempfile.mkdtemp(prefix="dsec-build-", dir=TMP_ROOT)
    n = Node(dsec_bin, seed_store(os.path.join(root, "store"))).start()
    yield n
    _finish_node(n)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def destroy_created(bnode):
    """Sandboxes a test created through the node's client go with the test."""
    mark = len(bnode.client.created)
    yield
    for sid in bnode.client.created[mark:]:
        bnode.client.delete(sid)
    del bnode.client.created[mark:]


@pytest.fixture
def ctx():
    d = tempfile.mkdtemp(prefix="dsec-build-ctx-", dir=TMP_ROOT)
    with open(os.path.join(d, "hello.txt"), "w") as f:
        f.write("hello from the context\n")
    os.chmod(os.path.join(d, "hello.txt"), 0o604)
    os.makedirs(os.path.join(d, "tools"))
    with open(os.path.join(d, "tools", "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho tool ran\n")
    os.chmod(os.path.join(d, "tools", "run.sh"), 0o755)
    with open(os.path.join(d, "Dockerfile"), "w") as f:
        f.write(DOCKERFILE)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def build(dsec_bin, node, ctx, version, *extra, dockerfile="Dockerfile", name="app/built"):
    argv = [dsec_bin, "layer", "build", "--dockerfile", os.path.join(ctx, dockerfile),
            "--name", name, "--version", version, "--store", node.store,
            "--rest", node.rest, *extra]
    t0 = time.monotonic()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    return p.returncode, p.stdout.decode(), p.stderr.decode(), time.monotonic() - t0


def step_lines(err):
    """{line number: 'CACHED' | 'ran'} for each RUN/COPY step of a build's log."""
    out, current = {}, None
    for line in err.splitlines():
        if line.startswith("Step "):
            current = int(line.split("(line ")[1].split(")")[0])
        elif current is not None and line.strip().startswith("CACHED"):
            out[current] = "CACHED"
        elif current is not None and line.strip().startswith("->"):
            out[current] = "ran"
    return out


def build_sandboxes(client):
    status, out = client.list({"dsec-build": "1"})
    assert status == 200, out
    return out["sandboxes"]


def test_build_then_exec_defaults(dsec_bin, bnode, ctx):
    rc, out, err, _ = build(dsec_bin, bnode, ctx, "1", "--build-arg", "GREETING=hello")
    assert rc == 0, err
    ref, digest = out.split()
    assert ref == "app/built@1" and digest.startswith("sha256:")
    assert "warning: Dockerfile line 13: EXPOSE is not kept" in err
    assert step_lines(err) == {5: "ran", 7: "ran", 8: "ran", 12: "ran"}, err

    # The catalog (GET /v1/layers) shows the exec defaults.
    c = bnode.client
    status, layers = c.call("GET", "/v1/layers")
    assert status == 200
    built = next(l for l in layers["layers"] if l["ref"] == "app/built@1")
    assert built["config"]["workdir"] == "/srv/app"
    assert built["config"]["user"] == "app"
    assert built["config"]["env"]["MSG"] == "hello there"
    assert "GREETING" not in built["config"]["env"]  # an ARG, not an ENV

    # One ref alone is the whole stack; execs start with ENV, WORKDIR, USER.
    sid = c.create_ok(layers=["app/built@1"])
    r = c.sh(sid, "pwd; id -u; whoami; echo $MSG; echo $APP_HOME; cat hello.txt built.txt"
                  " /tmp/uid.txt /tmp/arg.txt /base.txt; stat -c %a hello.txt run.sh; ./run.sh")
    assert r["exit_code"] == 0, r
    assert r["stdout"].splitlines() == [
        "/srv/app", "1234", "app", "hello there", "/srv/app", "hello from the context",
        "hello there from /srv/app as 0", "1234", "hello", "base", "604", "755", "tool ran"], (r["stdout"], r["stderr"])

    # An exec's own cwd and user win; the spec's env wins over the layer's.
    r = c.sh(sid, ["sh", "-c", "pwd; id -u"], cwd="/", user="0")
    assert r["stdout"] == "/\n0\n", r
    r = c.sh(sid, ["id", "-u"], user="1234:0")
    assert r["stdout"] == "1234\n", r
    spec_env = c.create_ok(layers=["app/built@1"], env={"MSG": "from the spec"})
    assert c.sh(spec_env, "echo $MSG $APP_HOME")["stdout"] == "from the spec /srv/app\n"

    # An unknown user is a clear error naming it.
    status, body = c.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "true", "user": "nosuch"})
    assert status == 400, body
    assert 'user "nosuch"' in body["error"]["message"], body
    assert "/etc/passwd" in body["error"]["message"], body


def test_rebuild_is_cached_and_a_changed_copy_reruns(dsec_bin, bnode, ctx):
    rc, out, err, _ = build(dsec_bin, bnode, ctx, "1", name="app/rebuilt")
    assert rc == 0, err
    first = out.split()[1]
    rc, out, err, took = build(dsec_bin, bnode, ctx, "1", name="app/rebuilt")
    assert rc == 0, err
    assert out.split()[1] == first
    assert set(step_lines(err).values()) == {"CACHED"}, err
    assert "Flatten" in err and "CACHED" in err.split("Flatten")[1], err
    assert took < 10, f"a cached rebuild took {took:.1f}s"
    # --no-cache runs every step again, to the same image.
    rc, out, err, _ = build(dsec_bin, bnode, ctx, "1", "--no-cache", name="app/rebuilt")
    assert rc == 0, err
    assert set(step_lines(err).values()) == {"ran"}, err
    assert out.split()[1] == first

    with open(os.path.join(ctx, "hello.txt"), "w") as f:
        f.write("changed\n")
    rc, out, err, _ = build(dsec_bin, bnode, ctx, "2", name="app/rebuilt")
    assert rc == 0, err
    # The RUN before the COPY is reused; the COPY and everything after run again.
    assert step_lines(err) == {5: "CACHED", 7: "ran", 8: "ran", 12: "ran"}, err
    sid = bnode.client.create_ok(layers=["app/rebuilt@2"])
    assert bnode.client.sh(sid, "cat hello.txt")["stdout"] == "changed\n"

    # Layers are immutable: the same N@V with other content is a conflict.
    rc, out, err, _ = build(dsec_bin, bnode, ctx, "1", name="app/rebuilt")
    assert rc == 1 and "conflict" in err, err

    # Nothing is left behind: no staging, no flatten trees, no mounts.
    assert os.listdir(os.path.join(bnode.store, "tmp")) == []
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    assert not [p for p in points if p.startswith(os.path.join(bnode.store, "tmp"))]


def test_failing_run_fails_the_build_and_leaves_no_sandbox(dsec_bin, bnode, ctx):
    with open(os.path.join(ctx, "Failing"), "w") as f:
        f.write("FROM base/busybox@1\nRUN echo oops-out; echo oops-err >&2; exit 3\n")
    rc, out, err, _ = build(dsec_bin, bnode, ctx, "1", dockerfile="Failing", name="app/fails")
    assert rc == 1, err
    assert "oops-out" in err and "oops-err" in err, err
    assert "line 2" in err and "exited with code 3" in err, err
    assert out == ""
    assert build_sandboxes(bnode.client) == []
    status, layers = bnode.client.call("GET", "/v1/layers")
    assert not any(l["ref"].startswith("app/fails") for l in layers["layers"])


def test_run_has_no_network_unless_asked(dsec_bin, bnode, ctx):
    with open(os.path.join(ctx, "Net"), "w") as f:
        f.write("FROM base/busybox@1\nRUN wget -q -T 2 -O /dev/null http://1.1.1.1/\n")
    rc, _, err, _ = build(dsec_bin, bnode, ctx, "1", dockerfile="Net", name="app/net")
    assert rc == 1 and "exited with code" in err, err
    assert build_sandboxes(bnode.client) == []


@pytest.mark.parametrize("text,message", [
    ("FROM base/busybox@1\nVOLUME /data\n", "Dockerfile line 2: VOLUME: is not supported"),
    ("FROM base/busybox@1\nSHELL [\"/bin/bash\", \"-c\"]\n", "Dockerfile line 2: SHELL"),
    ("FROM base/busybox@1 AS one\n", "multi-stage builds are not supported"),
    ("FROM base/busybox@1\nCOPY --chown=app hello.txt /\n", "option --chown is not supported"),
    ("FROM base/busybox@1\nADD http://example.test/x.tgz /\n", "ADD of a URL is not supported"),
    ("FROM base/busybox@1\nFROBNICATE\n", "line 2: FROBNICATE: unknown instruction"),
])
def test_unsupported_instructions_are_refused(dsec_bin, bnode, ctx, text, message):
    with open(os.path.join(ctx, "Bad"), "w") as f:
        f.write(text)
    rc, out, err, _ = build(dsec_bin, bnode, ctx, "1", dockerfile="Bad", name="app/bad")
    assert rc == 1, err
    assert message in err, err
    assert build_sandboxes(bnode.client) == []


def test_add_of_an_archive_is_refused(dsec_bin, bnode, ctx):
    subprocess.run(["tar", "-czf", os.path.join(ctx, "a.tgz"), "-C", ctx, "hello.txt"], check=True)
    with open(os.path.join(ctx, "Add"), "w") as f:
        f.write("FROM base/busybox@1\nADD a.tgz /x/\n")
    rc, _, err, _ = build(dsec_bin, bnode, ctx, "1", dockerfile="Add", name="app/add")
    assert rc == 1 and "is an archive, which ADD would unpack" in err, err


def test_layer_config_survives_a_peer_fetch(dsec_bin, bnode, ctx, tmp_path):
    """A layer fetched from a peer keeps its exec defaults."""
    rc, _, err, _ = build(dsec_bin, bnode, ctx, "9", name="app/fetched")
    assert rc == 0, err
    other = Node(dsec_bin, seed_store(str(tmp_path / "store")),
                 extra_args=["--join", f"127.0.0.1:{bnode.listen_port}"]).start()
    try:
        def joined():
            status, out = other.client.call("GET", "/v1/nodes")
            return status == 200 and sum(m["state"] == "alive" for m in out["nodes"]) >= 2
        wait_for(joined, 30, what="the second node to join")
        sid = other.client.create_ok(layers=["app/fetched@9"], node=other.node_id)
        r = other.client.sh(sid, "pwd; whoami; echo $MSG")
        assert r["stdout"] == "/srv/app\napp\nhi there\n", r
        with open(os.path.join(other.store, "catalog.json")) as f:
            entry = json.load(f)["layers"]["app/fetched@9"]
        assert entry["config"]["user"] == "app" and entry["config"]["workdir"] == "/srv/app"
    finally:
        _finish_node(other)


def test_exec_defaults_survive_a_node_restart(dsec_bin, bnode, ctx, tmp_path):
    """A sandbox adopted by a restarted node keeps its layers' env, cwd and user."""
    rc, _, err, _ = build(dsec_bin, bnode, ctx, "7", name="app/restarted")
    assert rc == 0, err
    n = Node(dsec_bin, bnode.store).start()  # a node of its own: this one is killed
    try:
        sid = n.client.create_ok(layers=["app/restarted@7"])
        n.proc.kill()  # its own Popen pid only
        n.proc.wait(30)
        n.start()  # same state dir, ports and node id
        r = n.client.sh(sid, "pwd; whoami; echo $MSG")
        assert r["stdout"] == "/srv/app\napp\nhi there\n", r
        n.client.delete(sid)
        # The adopted init was reparented when the node died: wait for its
        # reaping as test_restart does.
        assert_clean(n, allow_layer_mounts=True)
    finally:
        _finish_node(n)


def test_under_stacks_layers_below_from(dsec_bin, bnode, ctx):
    """--under REF puts layers below FROM's (bottom first), as a sandbox of
    several layers has them: the steps see the whole stack and the built layer
    holds it, alone. A ref the store lacks is refused by name."""
    for name, text in (("A", "a"), ("B", "b")):
        with open(os.path.join(ctx, name), "w") as f:
            f.write(f"FROM base/busybox@1\nRUN echo {text} > /{text}.txt\n")
        rc, _, err, _ = build(dsec_bin, bnode, ctx, "1", dockerfile=name, name=f"app/{text}")
        assert rc == 0, err
    with open(os.path.join(ctx, "AB"), "w") as f:
        f.write("FROM app/b@1\nRUN cat /a.txt /b.txt > /ab.txt\n")
    rc, _, err, _ = build(dsec_bin, bnode, ctx, "1", "--under", "app/a@1", dockerfile="AB",
                          name="app/ab")
    assert rc == 0, err
    c = bnode.client
    sid = c.create_ok(["app/ab@1"])
    r = c.sh(sid, ["cat", "/ab.txt", "/a.txt"])
    assert r["exit_code"] == 0 and r["stdout"] == "a\nb\na\n", r
    rc, _, err, _ = build(dsec_bin, bnode, ctx, "2", "--under", "app/none@1", dockerfile="AB",
                          name="app/ab")
    assert rc == 1 and "--under app/none@1" in err, err
    assert build_sandboxes(c) == []
