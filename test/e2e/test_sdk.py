# The blocking Python SDK (`import dsec`, DESIGN.md §4) against a real node's
# native port: every Client and Sandbox call, every error type the node can
# answer, the context manager, exec/exec_stream/files semantics, threads, and
# the node left clean. The asyncio form is in test_sdk_async.py; a node that
# dies or stalls mid-call is in test_sdk_failures.py.

import ast
import hashlib
import inspect
import os
import re
import subprocess
import textwrap
import threading
import time
import uuid

import pytest

from dsec_harness import (BUSYBOX, PYTHON, REPO, assert_clean, destroy_all, import_sdk,
                      sdk_env, wait_for)

dsec = import_sdk()

STUB = REPO / "bindings" / "python" / "dsec" / "__init__.pyi"


def uniq(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def sb(sdk):
    """A fresh busybox sandbox (destroyed by the `sdk` fixture after the test)."""
    return sdk.create([BUSYBOX], cpu=1, memory_mb=256)


def assert_error(exc_info, cls, code):
    e = exc_info.value
    assert type(e) is cls, f"want {cls.__name__}, got {type(e).__name__}: {e}"
    assert isinstance(e, dsec.Error)
    assert e.code == code, (e.code, e.message)
    assert isinstance(e.message, str) and e.message, e
    assert str(e) == e.message


def ps_args(sb):
    return sb.exec(["ps", "-o", "args"]).stdout


# -- the public surface --------------------------------------------------------------

def _stub_classes():
    """{class name: [public method names]} of the type stub."""
    tree = ast.parse(STUB.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = [n.name for n in node.body
                              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                              and not n.name.startswith("_")]
    return out


def test_package_exports_the_stub_names():
    stub = _stub_classes()
    for name in stub:
        assert name in dsec.__all__, f"{name} is in __init__.pyi but not in dsec.__all__"
        assert hasattr(dsec, name), name
    assert isinstance(dsec.__version__, str) and dsec.__version__


@pytest.mark.parametrize("cls_name", ["Client", "Sandbox", "ExecStream", "AsyncClient",
                                      "AsyncSandbox", "AsyncExecStream"])
def test_every_public_method_exists_and_has_a_docstring(cls_name):
    cls = getattr(dsec, cls_name)
    assert inspect.getdoc(cls), f"dsec.{cls_name} has no docstring"
    methods = _stub_classes()[cls_name]
    assert methods, cls_name
    for m in methods:
        assert hasattr(cls, m), f"dsec.{cls_name}.{m} is in the stub but not implemented"
        doc = inspect.getdoc(getattr(cls, m))
        assert doc and doc.strip(), f"dsec.{cls_name}.{m} has no docstring"
    # async methods in the stub are coroutines in the implementation
    tree = ast.parse(STUB.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            for f in node.body:
                if isinstance(f, ast.AsyncFunctionDef) and not f.name.startswith("__"):
                    assert inspect.iscoroutinefunction(getattr(cls, f.name)), \
                        f"dsec.{cls_name}.{f.name} should be async"


def test_help_shows_the_methods():
    import pydoc
    text = pydoc.render_doc(dsec.Client, renderer=pydoc.plaintext)
    for m in ("create", "create_many", "get", "list", "nodes", "layers", "close"):
        assert re.search(rf"\b{m}\(", text), f"help(dsec.Client) does not show {m}()"
    text = pydoc.render_doc(dsec.Sandbox, renderer=pydoc.plaintext)
    for m in ("exec", "exec_stream", "write_file", "read_file", "destroy", "info"):
        assert re.search(rf"\b{m}\(", text), f"help(dsec.Sandbox) does not show {m}()"


@pytest.mark.parametrize("cls_name", ["ExecResult", "OutputChunk", "SandboxInfo", "NodeInfo",
                                      "LayerInfo", "Error", "InvalidArgument", "TooLarge",
                                      "NotFound", "Conflict", "ResourceExhausted", "Unavailable",
                                      "Timeout"])
def test_value_and_error_types_are_documented(cls_name):
    cls = getattr(dsec, cls_name)
    assert inspect.getdoc(cls), f"dsec.{cls_name} has no docstring"
    for m in _stub_classes().get(cls_name, []):
        assert hasattr(cls, m), f"dsec.{cls_name}.{m} is in the stub but not implemented"


def test_error_hierarchy():
    assert issubclass(dsec.TooLarge, dsec.InvalidArgument)
    for cls, base, code in [(dsec.InvalidArgument, ValueError, "invalid_argument"),
                            (dsec.TooLarge, ValueError, "too_large"),
                            (dsec.NotFound, LookupError, "not_found"),
                            (dsec.Conflict, dsec.Error, "conflict"),
                            (dsec.ResourceExhausted, dsec.Error, "resource_exhausted"),
                            (dsec.Unavailable, ConnectionError, "unavailable"),
                            (dsec.Timeout, TimeoutError, "timeout")]:
        assert issubclass(cls, dsec.Error) and issubclass(cls, base), cls
        e = cls("boom")
        assert e.code == code and e.message == "boom" and str(e) == "boom"


# -- client, nodes, layers -----------------------------------------------------------

def test_client_addr_and_repr(sdk, node):
    assert sdk.addr == f"127.0.0.1:{node.listen_port}"
    assert sdk.addr in repr(sdk)


def test_client_from_dsec_addr(node, monkeypatch):
    monkeypatch.setenv("DSEC_ADDR", f"127.0.0.1:{node.listen_port}")
    with dsec.Client() as c:
        assert c.addr == f"127.0.0.1:{node.listen_port}"
        assert [n.id for n in c.nodes()] == [node.node_id]


def test_client_bad_addr_is_invalid_argument():
    with pytest.raises(dsec.InvalidArgument):
        dsec.Client("no-port-here")
    with pytest.raises(dsec.InvalidArgument):
        dsec.Client(12345)


def test_closed_client_fails_with_unavailable(node):
    c = dsec.Client(f"127.0.0.1:{node.listen_port}")
    assert c.nodes()
    c.close()
    c.close()  # idempotent
    with pytest.raises(dsec.Unavailable) as ei:
        c.list()
    assert_error(ei, dsec.Unavailable, "unavailable")


def test_client_context_manager_closes(node):
    with dsec.Client(f"127.0.0.1:{node.listen_port}") as c:
        assert c.layers()
    with pytest.raises(dsec.Unavailable):
        c.nodes()


def test_nodes(sdk, node):
    nodes = sdk.nodes()
    assert len(nodes) == 1, nodes
    n = nodes[0]
    assert isinstance(n, dsec.NodeInfo)
    assert n.id == node.node_id
    assert n.state == "alive"
    assert isinstance(n.incarnation, int) and n.incarnation > 0
    assert n.address == sdk.addr
    for k in ("free_memory_mb", "cpu_load", "sandboxes", "creating"):
        assert k in n.load and n.load[k] >= 0, n.load
    assert n.load["accepting"] is True
    assert isinstance(n.load["layers"], list)
    # The egress sources digest gossip carries is its own field, not a layer.
    assert not any(l.startswith("egress-sources:") for l in n.load["layers"]), n.load
    es = n.load["egress_sources"]
    assert es["same_as_this_node"] is True and isinstance(es["digest"], str), es


def test_nodes_load_counts_sandboxes_and_execs(sdk):
    before = sdk.nodes()[0].load
    with sdk.create([BUSYBOX]) as s:
        s.exec("true")
        during = sdk.nodes()[0].load
    assert during["sandboxes"] == before["sandboxes"] + 1, (before, during)
    assert BUSYBOX in during["layers"], during
    after = sdk.nodes()[0].load
    assert after["sandboxes"] == before["sandboxes"], (before, after)


def test_layers(sdk):
    layers = {l.ref: l for l in sdk.layers()}
    assert BUSYBOX in layers and PYTHON in layers, sorted(layers)
    for ref in (BUSYBOX, PYTHON):
        l = layers[ref]
        assert isinstance(l, dsec.LayerInfo)
        assert f"{l.name}@{l.version}" == ref, l
        assert l.kind == "base", l
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", l.digest), l
        assert l.size_bytes > 0, l
        assert l.created_at > 1_500_000_000, l


# -- create / info / get / list / destroy -------------------------------------------

def test_create_info_get_destroy(sdk, node):
    job = uniq("job")
    t0 = time.time()
    s = sdk.create(layers=[BUSYBOX], backend="container", cpu=0.5, memory_mb=300, ttl_s=600,
                   network_allow=[], labels={"job": job, "k": "v"}, request_id=None)
    assert isinstance(s, dsec.Sandbox)
    assert s.id.startswith(node.node_id + "."), s.id
    assert s.node == node.node_id
    assert s.backend == "container"
    assert s.layers == [BUSYBOX]
    assert s.labels == {"job": job, "k": "v"}
    assert t0 - 5 <= s.created_at <= time.time() + 5
    assert s.id in repr(s)

    info = s.info()
    assert isinstance(info, dsec.SandboxInfo)
    assert info.id == s.id and info.node == node.node_id
    assert info.state == "running", info
    assert info.layers == [BUSYBOX] and info.labels == {"job": job, "k": "v"}
    assert info.cpu == pytest.approx(0.5) and info.memory_mb == 300, info
    assert info.expires_at == pytest.approx(info.created_at + 600, abs=5), info

    # REST sees the same sandbox
    status, body = node.client.get(s.id)
    assert status == 200 and body["id"] == s.id, body

    g = sdk.get(s.id)
    assert isinstance(g, dsec.Sandbox) and g.id == s.id and g.labels == s.labels
    assert g.exec("echo via-get").stdout == "via-get\n"

    assert s.destroy() is True
    assert s.destroy() is False  # idempotent
    assert g.destroy() is False
    with pytest.raises(dsec.NotFound) as ei:
        sdk.get(s.id)
    assert_error(ei, dsec.NotFound, "not_found")
    assert s.id in ei.value.message
    with pytest.raises(dsec.NotFound):
        s.info()
    with pytest.raises(dsec.NotFound):
        s.exec("true")
    with pytest.raises(dsec.NotFound):
        s.write_file("/tmp/x", b"x")
    with pytest.raises(dsec.NotFound):
        s.read_file("/etc/passwd")
    status, _ = node.client.get(s.id)
    assert status == 404


def test_defaults_without_limits(sdk):
    s = sdk.create([BUSYBOX])
    info = s.info()
    assert info.state == "running" and info.backend == "container"
    assert info.cpu > 0 and info.memory_mb > 0, info
    assert info.labels == {} and info.expires_at is not None, info
    s.destroy()


def test_list_by_labels(sdk):
    job = uniq("job")
    made = [sdk.create([BUSYBOX], labels={"job": job, "g": str(i % 2)}) for i in range(3)]
    other = sdk.create([BUSYBOX], labels={"job": uniq("other")})
    got = sdk.list(labels={"job": job})
    assert all(isinstance(i, dsec.SandboxInfo) for i in got)
    assert [i.id for i in got] == [s.id for s in made], "oldest first, only matching labels"
    assert [i.created_at for i in got] == sorted(i.created_at for i in got)
    assert {i.id for i in sdk.list(labels={"job": job, "g": "1"})} == {made[1].id}
    assert sdk.list(labels={"job": uniq("nobody")}) == []
    everything = {i.id for i in sdk.list()}
    assert {s.id for s in made} | {other.id} <= everything
    for s in made:
        s.destroy()
    assert sdk.list(labels={"job": job}) == []
    with pytest.raises(dsec.InvalidArgument):
        sdk.list(labels={"job": 1})


def test_create_env_and_exec_env_override(sdk):
    s = sdk.create([BUSYBOX], env={"A": "spec-a", "B": "spec-b"})
    assert s.exec('echo "$A $B $C"').stdout == "spec-a spec-b \n"
    r = s.exec('echo "$A $B $C"', env={"B": "exec-b", "C": "exec-c"})
    assert r.stdout == "spec-a exec-b exec-c\n"
    assert s.exec('echo "$B"').stdout == "spec-b\n"  # the override was per exec


def test_request_id_is_idempotent_and_conflicts_on_another_spec(sdk):
    rid = uniq("rid")
    a = sdk.create([BUSYBOX], memory_mb=256, request_id=rid)
    b = sdk.create([BUSYBOX], memory_mb=256, request_id=rid)
    assert a.id == b.id
    with pytest.raises(dsec.Conflict) as ei:
        sdk.create([BUSYBOX], memory_mb=300, request_id=rid)
    assert_error(ei, dsec.Conflict, "conflict")
    assert len(sdk.list()) >= 1 and sum(i.id == a.id for i in sdk.list()) == 1


@pytest.mark.parametrize("kwargs", [
    dict(layers=["not a ref"]),
    dict(layers=[]),
    dict(layers=[BUSYBOX], memory_mb=-5),
    dict(layers=[BUSYBOX], memory_mb=0),
    dict(layers=[BUSYBOX], cpu=-1),
    dict(layers=[BUSYBOX], ttl_s=-1),
    dict(layers=[BUSYBOX], backend="no-such-backend"),
    dict(layers=[BUSYBOX], network_allow=["1.1.1.1"]),
    # rejected by the SDK before the node sees them (wrong types)
    dict(layers=BUSYBOX),
    dict(layers=[BUSYBOX], memory_mb="512"),
    dict(layers=[BUSYBOX], memory_mb=1.5),
    dict(layers=[BUSYBOX], cpu="1"),
    dict(layers=[BUSYBOX], labels={"a": 1}),
    dict(layers=[BUSYBOX], env=["A=1"]),
], ids=lambda kw: ",".join(f"{k}={v!r}" for k, v in kw.items()))
def test_create_invalid_argument(sdk, kwargs):
    before = {i.id for i in sdk.list()}
    with pytest.raises(dsec.InvalidArgument) as ei:
        sdk.create(**kwargs)
    assert_error(ei, dsec.InvalidArgument, "invalid_argument")
    assert isinstance(ei.value, ValueError)
    assert {i.id for i in sdk.list()} == before, "a failed create left a sandbox"


@pytest.mark.parametrize("ref", ["no/such-layer@1", BUSYBOX.split("@")[0] + "@999"])
def test_create_unknown_layer_is_not_found(sdk, ref):
    # As REST (404 not_found): a well-formed ref the store does not have.
    before = {i.id for i in sdk.list()}
    with pytest.raises(dsec.NotFound) as ei:
        sdk.create([ref])
    assert_error(ei, dsec.NotFound, "not_found")
    assert ref in ei.value.message
    assert {i.id for i in sdk.list()} == before


def test_create_unknown_keyword_is_a_type_error(sdk):
    with pytest.raises(TypeError):
        sdk.create([BUSYBOX], memroy_mb=512)


def test_create_pinned_to_unknown_node_is_not_found(sdk):
    with pytest.raises(dsec.NotFound) as ei:
        sdk.create([BUSYBOX], node="no-such-node")
    assert_error(ei, dsec.NotFound, "not_found")


def test_create_pinned_to_this_node(sdk, node):
    s = sdk.create([BUSYBOX], node=node.node_id)
    assert s.node == node.node_id


@pytest.mark.parametrize("bad_id,cls", [
    ("nosuchnode.0123456789", dsec.NotFound),
    ("garbage", dsec.InvalidArgument),
    (123, dsec.InvalidArgument),
])
def test_get_errors(sdk, node, bad_id, cls):
    with pytest.raises(cls):
        sdk.get(bad_id)


def test_get_unknown_id_on_this_node_is_not_found(sdk, node):
    with pytest.raises(dsec.NotFound) as ei:
        sdk.get(f"{node.node_id}.doesnotexist")
    assert_error(ei, dsec.NotFound, "not_found")


# -- the context manager ---------------------------------------------------------------

def test_with_destroys_on_exit(sdk):
    with sdk.create([BUSYBOX]) as s:
        assert s.exec("echo in").stdout == "in\n"
        sid = s.id
    with pytest.raises(dsec.NotFound):
        sdk.get(sid)


def test_with_destroys_on_exception_and_keeps_it(sdk):
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with sdk.create([BUSYBOX]) as s:
            sid = s.id
            raise Boom("from the body")
    with pytest.raises(dsec.NotFound):
        sdk.get(sid)


def test_with_body_exception_wins_over_a_node_error(sdk):
    with pytest.raises(KeyError):
        with sdk.create([BUSYBOX]) as s:
            s.destroy()
            raise KeyError("body")


def test_with_after_destroy_inside_is_fine(sdk):
    with sdk.create([BUSYBOX]) as s:
        assert s.destroy() is True
    with pytest.raises(dsec.NotFound):
        s.info()


# -- create_many -----------------------------------------------------------------------

def test_create_many(sdk):
    job = uniq("many")
    sbs = sdk.create_many(6, [BUSYBOX], memory_mb=256, labels={"job": job})
    assert len(sbs) == 6 and all(isinstance(s, dsec.Sandbox) for s in sbs)
    assert len({s.id for s in sbs}) == 6
    assert {i.id for i in sdk.list(labels={"job": job})} == {s.id for s in sbs}
    for i, s in enumerate(sbs):
        assert s.labels == {"job": job}
        assert s.exec(["echo", str(i)]).stdout == f"{i}\n"
    for s in sbs:
        assert s.destroy() is True
    assert sdk.list(labels={"job": job}) == []


def test_create_many_invalid_spec_fails_all_and_leaves_nothing(sdk):
    before = {i.id for i in sdk.list()}
    with pytest.raises(dsec.InvalidArgument) as ei:
        sdk.create_many(3, [BUSYBOX], memory_mb=-1)
    assert "3 of 3 creates failed" in ei.value.message, ei.value.message
    assert ei.value.code == "invalid_argument"
    with pytest.raises(dsec.NotFound) as ei:
        sdk.create_many(4, ["no/such-layer@1"])
    assert "4 of 4 creates failed" in ei.value.message, ei.value.message
    assert {i.id for i in sdk.list()} == before


@pytest.mark.parametrize("n", [0, -1, True, 1.5, "3"])
def test_create_many_bad_n(sdk, n):
    with pytest.raises(dsec.InvalidArgument):
        sdk.create_many(n, [BUSYBOX])


def test_create_many_rejects_request_id(sdk):
    with pytest.raises(dsec.InvalidArgument):
        sdk.create_many(2, [BUSYBOX], request_id="x")


def create_retrying(c, layers, bound_s=15, **spec):
    deadline = time.monotonic() + bound_s
    while True:
        try:
            return c.create(layers, **spec)
        except dsec.ResourceExhausted:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_create_many_over_capacity_destroys_the_made_ones(node_factory, store):
    # A private node with room for 4: 7 at once cannot all fit.
    n = node_factory.start("--max-sandboxes", "4")
    with dsec.Client(f"127.0.0.1:{n.listen_port}") as c:
        job = uniq("cap")
        with pytest.raises(dsec.ResourceExhausted) as ei:
            c.create_many(7, [BUSYBOX], labels={"job": job})
        assert_error(ei, dsec.ResourceExhausted, "resource_exhausted")
        m = re.search(r"(\d+) of 7 creates failed", ei.value.message)
        assert m and int(m.group(1)) >= 3, ei.value.message
        assert c.list() == [], "create_many left sandboxes behind after failing"
        assert_clean(n, allow_layer_mounts=True)

        # One at a time: the fifth is refused, and room comes back after a destroy.
        made = [c.create([BUSYBOX]) for _ in range(4)]
        with pytest.raises(dsec.ResourceExhausted) as ei:
            c.create([BUSYBOX])
        assert_error(ei, dsec.ResourceExhausted, "resource_exhausted")
        assert made.pop().destroy() is True
        # The node frees the slot when the sandbox actor is gone, which can be
        # just after destroy() answered (reported as a node race): a user
        # retries a ResourceExhausted, so the test does too, within a bound.
        made.append(create_retrying(c, [BUSYBOX]))
        assert len(c.list()) == 4
        for s in made:
            s.destroy()
        assert c.list() == []
    assert_clean(n, allow_layer_mounts=True)


# -- exec --------------------------------------------------------------------------------

def test_exec_string_runs_through_sh(sb):
    r = sb.exec("echo a; echo b | tr b c; X=5; echo $((X*2))")
    assert isinstance(r, dsec.ExecResult)
    assert r.exit_code == 0 and r.ok
    assert r.stdout == "a\nc\n10\n"
    assert r.stdout_bytes == b"a\nc\n10\n"
    assert r.stderr == "" and r.stderr_bytes == b""
    assert r.timed_out is False and r.truncated is False
    assert r.duration_ms >= 0 and r.node_ms > 0


def test_exec_argv_is_not_shell_interpreted(sb):
    r = sb.exec(["echo", "$HOME", "a;b", "*"])
    assert r.stdout == "$HOME a;b *\n"
    r = sb.exec(("sh", "-c", "echo $0-$1", "x", "y"))  # any sequence of str
    assert r.stdout == "x-y\n"


@pytest.mark.parametrize("code", [1, 7, 42, 255])
def test_exec_nonzero_exit_is_a_result(sb, code):
    r = sb.exec(f"echo out; echo err >&2; exit {code}")
    assert r.exit_code == code
    assert not r.ok
    assert r.stdout == "out\n" and r.stderr == "err\n"


def test_exec_killed_by_signal(sb):
    r = sb.exec("kill -9 $$")
    assert r.exit_code == 137 and not r.ok


def test_exec_unknown_program(sb):
    try:
        r = sb.exec(["/no/such/program"])
    except dsec.InvalidArgument:
        return  # also acceptable: refused up front
    assert r.exit_code != 0 and not r.ok


def test_exec_cwd(sb):
    sb.exec("mkdir -p /tmp/wd/sub")
    assert sb.exec("pwd", cwd="/tmp/wd/sub").stdout == "/tmp/wd/sub\n"
    assert sb.exec(["pwd"], cwd="/").stdout == "/\n"


def test_exec_env(sb):
    r = sb.exec(["sh", "-c", 'echo "$FOO|$BAR"'], env={"FOO": "1", "BAR": "two words"})
    assert r.stdout == "1|two words\n"


def test_exec_stdin_bytes_and_str(sb):
    assert sb.exec("cat", stdin=b"\x00\x01bin\xff").stdout_bytes == b"\x00\x01bin\xff"
    assert sb.exec("cat", stdin="héllo\n").stdout == "héllo\n"
    r = sb.exec(["wc", "-c"], stdin=b"x" * 200_000)
    assert r.stdout.strip() == "200000"
    # no stdin: EOF at once, not a hang
    r = sb.exec("cat", timeout_s=20)
    assert r.ok and not r.timed_out and r.stdout == ""


def test_exec_timeout(sb):
    t0 = time.monotonic()
    r = sb.exec("echo before; sleep 30", timeout_s=1)
    assert r.timed_out is True
    assert r.exit_code == 137 and not r.ok
    assert r.stdout == "before\n"
    assert time.monotonic() - t0 < 20, "timeout_s=1 did not end the call"
    wait_for(lambda: "sleep 30" not in ps_args(sb), 10, what="the timed-out sleep to be killed")
    assert sb.exec("echo alive").stdout == "alive\n"


def test_exec_binary_output(sb):
    r = sb.exec(r"printf '\377\376\000\001ok'; printf '\200err' >&2")
    assert r.stdout_bytes == b"\xff\xfe\x00\x01ok"
    assert r.stderr_bytes == b"\x80err"
    # str views replace invalid UTF-8 instead of raising
    assert r.stdout.endswith("ok") and "\ufffd" in r.stdout
    assert r.stderr == "\ufffderr"


def test_exec_large_output_intact(sb):
    r = sb.exec("seq 1 400000", timeout_s=120)
    want = "".join(f"{i}\n" for i in range(1, 400001)).encode()
    assert r.ok and not r.truncated, (r.exit_code, len(r.stdout_bytes))
    assert hashlib.sha256(r.stdout_bytes).hexdigest() == hashlib.sha256(want).hexdigest()


def test_exec_result_is_immutable(sb):
    r = sb.exec("true")
    with pytest.raises(Exception):
        r.exit_code = 5


@pytest.mark.parametrize("kwargs", [
    dict(cmd=""),
    dict(cmd=[]),
    dict(cmd=5),
    dict(cmd=b"true"),
    dict(cmd=["echo", 1]),
    dict(cmd="true", stdin=5),
    dict(cmd="true", env={"A": 1}),
    dict(cmd="true", cwd=5),
    dict(cmd="true", timeout_s="1"),
], ids=repr)
def test_exec_invalid_argument(sb, kwargs):
    cmd = kwargs.pop("cmd")
    with pytest.raises(dsec.InvalidArgument):
        sb.exec(cmd, **kwargs)


def test_exec_in_relative_cwd_or_missing_cwd_is_not_a_crash(sb):
    try:
        r = sb.exec("pwd", cwd="/no/such/dir")
        assert r.exit_code != 0
    except dsec.InvalidArgument:
        pass
    except dsec.NotFound:
        pass


# -- exec_stream ---------------------------------------------------------------------------

def test_exec_stream_order_and_timing(sb):
    t0 = time.monotonic()
    s = sb.exec_stream("echo first; sleep 2; echo second >&2; sleep 0.2; echo third",
                       timeout_s=60)
    assert isinstance(s, dsec.ExecStream)
    got = []
    for chunk in s:
        assert isinstance(chunk, dsec.OutputChunk)
        assert chunk.stream in ("stdout", "stderr")
        got.append((time.monotonic(), chunk))
    ended = time.monotonic()
    assert got, "no chunks"
    # the first chunk came before the command ended: it was streamed, not buffered
    assert got[0][0] < ended - 1.0, \
        f"first chunk at {got[0][0] - t0:.2f}s, end at {ended - t0:.2f}s: not streamed"
    out = b"".join(c.data for _, c in got if c.stream == "stdout")
    err = b"".join(c.data for _, c in got if c.stream == "stderr")
    assert out == b"first\nthird\n" and err == b"second\n"
    text = "".join(c.text for _, c in got)
    assert text.index("first") < text.index("second") < text.index("third")
    r = s.result
    assert isinstance(r, dsec.ExecResult) and r.ok
    assert s.result is r  # cached


def test_exec_stream_wait_and_exit_code(sb):
    s = sb.exec_stream(["sh", "-c", "echo x; exit 3"])
    r = s.wait()
    assert r.exit_code == 3
    assert s.result.exit_code == 3


def test_exec_stream_cwd_env_stdin(sb):
    s = sb.exec_stream("pwd; echo $V; cat", cwd="/tmp", env={"V": "vee"}, stdin="in\n")
    data = b"".join(c.data for c in s)
    assert data == b"/tmp\nvee\nin\n"
    assert s.result.ok


def test_exec_stream_binary(sb):
    s = sb.exec_stream(r"printf '\000\377\376'")
    assert b"".join(c.data for c in s) == b"\x00\xff\xfe"


def test_exec_stream_timeout(sb):
    s = sb.exec_stream("echo go; sleep 30", timeout_s=1)
    assert b"".join(c.data for c in s) == b"go\n"
    assert s.result.timed_out and s.result.exit_code == 137


def test_exec_stream_cancel_kills_the_command(sb):
    s = sb.exec_stream("echo started; sleep 61; echo never", timeout_s=120)
    it = iter(s)
    first = next(it)
    assert first.data == b"started\n"
    assert "sleep 61" in ps_args(sb)
    t0 = time.monotonic()
    s.cancel()
    rest = b"".join(c.data for c in it)
    assert time.monotonic() - t0 < 20, "cancel did not end the stream"
    assert b"never" not in rest
    try:
        assert not s.result.ok
    except dsec.Error:
        pass  # a cancelled call may also end with an error
    wait_for(lambda: "sleep 61" not in ps_args(sb), 10, what="the cancelled command to die")


def test_exec_stream_on_a_destroyed_sandbox(sdk):
    gone = sdk.create([BUSYBOX])
    gone.destroy()
    stream = gone.exec_stream("true")
    assert list(stream) == []
    with pytest.raises(dsec.NotFound):
        stream.result


# -- files ------------------------------------------------------------------------------

def test_file_round_trip_binary(sb):
    data = bytes(range(256)) * 1000 + b"\x00end"
    assert sb.write_file("/tmp/bin.dat", data) is None
    assert sb.read_file("/tmp/bin.dat") == data
    assert sb.exec(["wc", "-c", "/tmp/bin.dat"]).stdout.split()[0] == str(len(data))


def test_file_str_is_utf8(sb):
    sb.write_file("/tmp/t.txt", "héllo ✓\n")
    assert sb.read_file("/tmp/t.txt") == "héllo ✓\n".encode()
    assert sb.exec("cat /tmp/t.txt").stdout == "héllo ✓\n"


def test_file_bytearray_and_memoryview(sb):
    sb.write_file("/tmp/ba", bytearray(b"ba"))
    sb.write_file("/tmp/mv", memoryview(b"mv"))
    assert sb.read_file("/tmp/ba") == b"ba" and sb.read_file("/tmp/mv") == b"mv"


def test_file_parents_created_overwrite_and_empty(sb):
    sb.write_file("/work/deep/er/a.py", b"first version, long")
    sb.write_file("/work/deep/er/a.py", b"second")
    assert sb.read_file("/work/deep/er/a.py") == b"second"
    sb.write_file("/work/empty", b"")
    assert sb.read_file("/work/empty") == b""


def test_file_written_by_exec_is_readable(sb):
    sb.exec("printf 'from exec' > /tmp/e.txt")
    assert sb.read_file("/tmp/e.txt") == b"from exec"


def test_file_large(sb):
    data = os.urandom(8 << 20)
    sb.write_file("/tmp/large", data)
    assert hashlib.sha256(sb.read_file("/tmp/large")).digest() == hashlib.sha256(data).digest()


@pytest.mark.parametrize("path", ["relative/path", "tmp/x", "", "./x"])
def test_file_relative_path_is_invalid_argument(sb, path):
    with pytest.raises(dsec.InvalidArgument) as ei:
        sb.write_file(path, b"x")
    assert_error(ei, dsec.InvalidArgument, "invalid_argument")
    with pytest.raises(dsec.InvalidArgument):
        sb.read_file(path)


def test_file_missing_is_not_found(sb):
    with pytest.raises(dsec.NotFound) as ei:
        sb.read_file("/no/such/file")
    assert_error(ei, dsec.NotFound, "not_found")


def test_file_directory_is_not_a_file(sb):
    with pytest.raises(dsec.Error) as ei:
        sb.read_file("/tmp")
    assert isinstance(ei.value, (dsec.InvalidArgument, dsec.NotFound)), ei.value


def test_file_read_max_bytes_is_too_large(sb):
    sb.write_file("/tmp/ten", b"0123456789")
    with pytest.raises(dsec.TooLarge) as ei:
        sb.read_file("/tmp/ten", max_bytes=9)
    assert_error(ei, dsec.TooLarge, "too_large")
    assert isinstance(ei.value, dsec.InvalidArgument)  # except InvalidArgument catches it
    assert sb.read_file("/tmp/ten", max_bytes=10) == b"0123456789"


def test_file_wrong_data_type(sb):
    with pytest.raises(dsec.InvalidArgument):
        sb.write_file("/tmp/x", 123)
    with pytest.raises(dsec.InvalidArgument):
        sb.write_file("/tmp/x", ["a"])


def test_file_write_through_symlink_stays_in_the_sandbox(sb):
    marker = f"/tmp/dsec-sdk-escape-{uuid.uuid4().hex[:8]}"
    sb.exec("ln -s / /tmp/rootlink")
    try:
        sb.write_file(f"/tmp/rootlink{marker}", b"x")
    except dsec.Error:
        pass  # refusing is fine; reaching the host is not
    assert not os.path.exists(marker), "write_file through a symlink reached the host"


# -- threads -------------------------------------------------------------------------------

def test_eight_threads_share_one_client(sdk):
    shared = sdk.create([BUSYBOX], memory_mb=256)
    errors = []
    done = []

    def worker(t):
        try:
            for i in range(15):
                r = shared.exec(["sh", "-c", 'echo "$0 $1"; echo e$0 >&2; exit $(($1 % 4))',
                                 str(t), str(i)])
                assert r.stdout == f"{t} {i}\n" and r.stderr == f"e{t}\n", r
                assert r.exit_code == i % 4, r
            with sdk.create([BUSYBOX], labels={"thread": str(t)}) as own:
                data = os.urandom(1000) + str(t).encode()
                own.write_file(f"/tmp/t{t}", data)
                assert own.read_file(f"/tmp/t{t}") == data
                assert sdk.get(own.id).id == own.id
            done.append(t)
        except BaseException as e:  # reported by the main thread
            errors.append((t, repr(e)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not errors, errors
    assert sorted(done) == list(range(8))
    for t in range(8):
        assert sdk.list(labels={"thread": str(t)}) == []


def test_blocking_call_releases_the_gil(sb):
    # While one thread waits on a 2 s exec, another makes progress.
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    th = threading.Thread(target=spin)
    th.start()
    try:
        sb.exec("sleep 2")
    finally:
        stop.set()
        th.join(10)
    assert len(ticks) > 20, f"the other thread ran only {len(ticks)} times in 2 s"


# -- the python layer, used from a plain /usr/bin/python3 --------------------------------

def test_design_example_in_a_fresh_python(node):
    script = textwrap.dedent("""
        import dsec
        c = dsec.Client()                      # DSEC_ADDR
        with c.create(layers=["base/python@3.11"], backend="container", cpu=1,
                      memory_mb=512, ttl_s=900, network_allow=[],
                      labels={"job": "grpo-7"}, request_id=None) as sb:
            r = sb.exec("python3 -c 'print(6*7)'", timeout_s=60)
            assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (0, "42\\n", "", False), r
            sb.write_file("/work/a.py", b"import sys; print(sum(map(int, sys.argv[1:])))")
            assert sb.read_file("/work/a.py").startswith(b"import sys")
            r = sb.exec(["python3", "/work/a.py", "1", "2", "3"], timeout_s=60)
            print("RESULT", r.stdout.strip())
            sid = sb.id
        try:
            c.get(sid)
            raise SystemExit("sandbox survived the with block")
        except dsec.NotFound:
            print("DESTROYED")
    """)
    p = subprocess.run(["/usr/bin/python3", "-c", script], env=sdk_env(f"127.0.0.1:{node.listen_port}"),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert p.stdout.decode().splitlines() == ["RESULT 6", "DESTROYED"], p.stdout


def test_interpreter_exits_promptly_with_an_open_client(node):
    # atexit stops the native actor system: no hang at exit with live connections.
    script = ("import dsec; c = dsec.Client(); a = dsec.AsyncClient(); "
              "print(len(c.layers()))")
    p = subprocess.run(["/usr/bin/python3", "-c", script],
                       env=sdk_env(f"127.0.0.1:{node.listen_port}"),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert int(p.stdout) >= 2


# -- the node is left clean ------------------------------------------------------------------

def test_zz_node_left_clean(sdk, node):
    destroy_all(sdk)
    assert sdk.list() == []
    assert sdk.nodes()[0].load["sandboxes"] == 0
    assert_clean(node, allow_layer_mounts=True)
