# The stateful code interpreter (issue 26 part 4) on the container backend:
# sb.run_code through the Python SDK (blocking and asyncio), the server's own
# HTTP protocol from inside the sandbox (what @e2b/code-interpreter speaks),
# the layer's start command, and the bad inputs. The sandbox is made from
# base/code-interpreter@1, which `dsec layer defaults` builds.

import asyncio
import base64
import json
import time

import pytest

from dsec_harness import BUSYBOX, PYTHON, import_sdk

dsec = import_sdk()

INTERP = "base/code-interpreter@1"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def isb(sdk_client, node):
    sb = sdk_client.create([INTERP], cpu=1, memory_mb=1024)
    yield sb
    try:
        sb.destroy()
    except dsec.Error:
        pass


def http_in_sandbox(sb, method, path, body=None):
    """A request to the server from inside the sandbox (python3's http.client):
    (status, content-type, body text)."""
    script = (
        "import http.client, json, sys\n"
        "c = http.client.HTTPConnection('127.0.0.1', 49999, timeout=60)\n"
        "b = sys.stdin.read()\n"
        "c.request(sys.argv[1], sys.argv[2], body=b or None,"
        " headers={'Content-Type': 'application/json'} if b else {})\n"
        "r = c.getresponse()\n"
        "print(json.dumps([r.status, r.getheader('Content-Type') or '',"
        " r.getheader('Transfer-Encoding') or '', r.read().decode()]))\n")
    r = sb.exec(["python3", "-c", script, method, path],
                stdin=json.dumps(body) if body is not None else "", timeout_s=90)
    assert r.exit_code == 0, r
    return json.loads(r.stdout)


def test_state_persists_and_last_expression_is_the_text(isb):
    assert isb.run_code("x = 1").text is None
    ex = isb.run_code("x + 1")
    assert ex.text == "2" and ex.error is None, ex
    assert ex.results[-1]["text/plain"] == "2" and ex.results[-1]["is_main_result"]
    assert isb.run_code("def f(a):\n    return a * x\nf(21)").text == "21"


def test_stdout_and_stderr_stream_in_order(isb):
    seen = []
    ex = isb.run_code("import sys, time\nprint('one')\ntime.sleep(1)\n"
                      "print('two', file=sys.stderr)\nimport os; os.system('echo three')",
                      on_stdout=lambda t: seen.append(("out", t, time.monotonic())),
                      on_stderr=lambda t: seen.append(("err", t, time.monotonic())))
    assert ex.stdout == "one\nthree\n" and ex.stderr == "two\n", ex
    assert [s[:2] for s in seen] == [("out", "one\n"), ("err", "two\n"), ("out", "three\n")]
    # "one" arrived before the cell's sleep ended: streamed, not at the end.
    assert seen[1][2] - seen[0][2] > 0.5, seen


def test_exception_gives_name_value_traceback_and_context_survives(isb):
    isb.run_code("kept = 'yes'")
    ex = isb.run_code("def g():\n    raise ValueError('bad thing')\ng()")
    assert ex.error is not None and ex.text is None
    assert ex.error.name == "ValueError" and ex.error.value == "bad thing", ex.error
    assert "Traceback" in ex.error.traceback and "in g" in ex.error.traceback, ex.error
    assert "raise ValueError" in ex.error.traceback  # the cell's own source line
    assert isb.run_code("kept").text == "'yes'"
    assert isb.run_code("1 +").error.name == "SyntaxError"


def test_matplotlib_figure_is_a_png_result(isb):
    ex = isb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()")
    assert ex.error is None, ex.error
    pngs = [r for r in ex.results if "image/png" in r]
    assert len(pngs) == 1, ex.results
    assert base64.b64decode(pngs[0]["image/png"]).startswith(PNG_MAGIC)
    # A figure left open at the end of a cell is shown too, then closed.
    ex = isb.run_code("fig = plt.figure(); plt.bar([1, 2], [3, 4]); 7")
    assert [("image/png" in r, r.get("text/plain")) for r in ex.results][-1] == (False, "7")
    assert sum("image/png" in r for r in ex.results) == 1
    assert isb.run_code("len(plt.get_fignums())").text == "0"


def test_contexts_are_independent(isb):
    a, b = isb.code_context(), isb.code_context(cwd="/tmp")
    assert a.id != b.id and b.cwd == "/tmp"
    isb.run_code("v = 'a'", context=a)
    isb.run_code("v = 'b'", context=b)
    assert isb.run_code("v", context=a).text == "'a'"
    assert isb.run_code("v", context=b.id).text == "'b'"
    assert isb.run_code("import os; os.getcwd()", context=b).text == "'/tmp'"
    ids = {c.id for c in isb.code_contexts()}
    assert {a.id, b.id} <= ids
    isb.restart_code_context(a)
    assert isb.run_code("v", context=a).error.name == "NameError"
    isb.remove_code_context(b)
    with pytest.raises(dsec.NotFound, match="context"):
        isb.run_code("v", context=b)


def test_timeout_interrupts_the_cell_and_the_context_survives(isb):
    ctx = isb.code_context()
    isb.run_code("before = 41", context=ctx)
    t0 = time.monotonic()
    ex = isb.run_code("while True: pass", context=ctx, timeout_s=2)
    took = time.monotonic() - t0
    assert ex.timed_out and ex.error.name == "TimeoutError", ex
    assert "KeyboardInterrupt" in ex.error.traceback
    assert took < 15, took
    assert isb.run_code("before + 1", context=ctx).text == "42"


def test_env_is_per_cell(isb):
    ex = isb.run_code("import os; os.environ.get('DSEC_T')", env={"DSEC_T": "v1"})
    assert ex.text == "'v1'"
    assert isb.run_code("import os; repr(os.environ.get('DSEC_T'))").text == "'None'"


def test_server_protocol_from_inside(isb):
    status, ctype, _, body = http_in_sandbox(isb, "GET", "/health")
    assert status == 200 and body == "OK"
    status, ctype, te, body = http_in_sandbox(isb, "POST", "/execute",
                                              {"code": "print('p')\nz = 5\nz * 2"})
    assert status == 200 and ctype == "application/x-ndjson" and te == "chunked"
    msgs = [json.loads(line) for line in body.splitlines()]
    types = [m["type"] for m in msgs]
    assert types == ["stdout", "result", "number_of_executions", "end_of_execution"], msgs
    assert msgs[0]["text"] == "p\n" and msgs[1]["text"] == "10" and msgs[1]["is_main_result"]
    status, _, _, body = http_in_sandbox(isb, "POST", "/contexts", {"language": "python"})
    ctx = json.loads(body)
    assert status == 200 and ctx["language"] == "python" and ctx["id"]
    status, _, _, body = http_in_sandbox(isb, "GET", "/contexts")
    assert ctx["id"] in [c["id"] for c in json.loads(body)]
    assert http_in_sandbox(isb, "POST", f"/contexts/{ctx['id']}/restart")[0] == 204
    assert http_in_sandbox(isb, "DELETE", f"/contexts/{ctx['id']}")[0] == 204
    status, _, _, body = http_in_sandbox(isb, "POST", "/execute",
                                         {"code": "1", "context_id": ctx["id"]})
    assert status == 404 and ctx["id"] in body
    status, _, _, body = http_in_sandbox(isb, "POST", "/execute", {"code": "1", "language": "r"})
    assert status == 400 and '"r"' in body and "python" in body
    assert http_in_sandbox(isb, "POST", "/nope")[0] == 404


def test_started_by_the_layer_config(isb, node):
    procs = [p.cmd for p in isb.processes()]
    assert any("code_interpreter/server.py" in c for c in procs), procs
    status, layers = node.client.call("GET", "/v1/layers")
    assert status == 200
    cfg = next(x for x in layers["layers"] if x["ref"] == INTERP)["config"]
    assert cfg["start"] == ["/usr/bin/python3", "/usr/lib/dsec/code_interpreter/server.py"]


def test_bad_inputs(sdk, isb):
    with pytest.raises(dsec.InvalidArgument, match="javascript"):
        isb.run_code("1", language="javascript")
    with pytest.raises(dsec.NotFound, match="no-such-context"):
        isb.run_code("1", context="no-such-context")
    plain = sdk.create([BUSYBOX, PYTHON], cpu=1, memory_mb=256)
    with pytest.raises(dsec.InterpreterNotRunning, match=INTERP):
        plain.run_code("1")
    bare = sdk.create([BUSYBOX], cpu=1, memory_mb=256)
    with pytest.raises(dsec.InterpreterNotRunning, match="not running"):
        bare.run_code("1")
    bare.destroy()
    with pytest.raises(dsec.NotFound):
        bare.run_code("1")


def test_async_run_code(node, isb):
    async def main():
        async with dsec.AsyncClient(f"127.0.0.1:{node.listen_port}") as c:
            sb = await c.get(isb.id)
            ctx = await sb.code_context()
            await sb.run_code("y = 20", context=ctx)
            chunks = []

            async def on_out(t):
                chunks.append(t)
            ex = await sb.run_code("print('a'); y + 2", context=ctx, on_stdout=on_out)
            return ex, chunks
    ex, chunks = asyncio.run(main())
    assert ex.text == "22" and chunks == ["a\n"], (ex, chunks)
