# Every error says whose failure it is (src/core/error_kind.hpp): the
# platform's (`infra` true: node lost, out of capacity, the sandbox killed
# under the node) or the request's and the agent's (false: bad input, no such
# sandbox, the agent past its own memory_mb). Through REST ("infra" in every
# error body) and the SDK (err.infra), and examples/rollout.py runs, counting
# the two apart, with a job-level preemption midway.
import os
import signal
import subprocess

from dsec_harness import BUSYBOX, PYTHON, REPO, assert_clean, import_sdk, sdk_env, wait_for
from test_restart import gone, init_pid_of, kill9


def test_rest_errors_carry_the_verdict(client):
    status, out = client.create(memory_mb=1)
    assert status == 400 and out["error"]["infra"] is False, out
    status, out = client.get("nosuchnode.x")
    assert status == 404 and out["error"]["infra"] is False, out
    hog = client.create_ok(memory_mb=32)
    client.exec(hog, "(dd if=/dev/zero of=/dev/null bs=100M count=1 &) ; sleep 5", timeout_s=60)
    wait_for(lambda: client.get(hog)[1]["state"] == "failed", 30, what="the hog to be OOM-killed")
    status, out = client.exec(hog, "true")
    assert status == 503 and "(oom)" in out["error"]["message"], out
    assert out["error"]["infra"] is False, out  # the agent's own memory_mb


def test_sdk_errors_say_infra_or_not(node_factory):
    dsec = import_sdk()
    n = node_factory.start()
    c = dsec.Client(f"127.0.0.1:{n.listen_port}")
    try:
        with_bad = None
        try:
            c.create([BUSYBOX], memory_mb=1)
        except dsec.InvalidArgument as e:
            with_bad = e
        assert with_bad is not None and with_bad.infra is False
        try:
            c.get(n.node_id + ".nosuch")
        except dsec.NotFound as e:
            assert e.infra is False
        else:
            raise AssertionError("no NotFound")
        # A sandbox killed under the node: the platform's failure.
        sb = c.create([BUSYBOX], memory_mb=64)
        pid = init_pid_of(n.node_id, sb.id)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: gone(pid), 10, what="init to die")
        wait_for(lambda: sb.info().state == "failed", 10, what="the sandbox to be failed")
        try:
            sb.exec("true")
        except dsec.Unavailable as e:
            assert e.infra is True, e.message
        else:
            raise AssertionError("no Unavailable")
        sb.destroy()
        # The node lost mid-session: infra.
        other = c.create([BUSYBOX], memory_mb=64)
        kill9(n)
        try:
            other.exec("true")
        except dsec.Error as e:
            assert isinstance(e, (dsec.Unavailable, dsec.Timeout)) and e.infra is True, e
        else:
            raise AssertionError("exec on a dead node answered")
    finally:
        c.close()
    n.start()  # adopts `other`
    status, out = n.client.delete(other.id)
    assert status == 200 and out["deleted"] is True, out
    assert_clean(n, allow_layer_mounts=True)


def test_rollout_example_runs_and_counts_failures_apart(node):
    p = subprocess.run(
        ["/usr/bin/python3", str(REPO / "examples" / "rollout.py"), "--groups", "2",
         "--rollouts", "3", "--preempt", "0.5"],
        env=sdk_env(f"127.0.0.1:{node.listen_port}"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, timeout=600)
    out = p.stdout.decode()
    assert p.returncode == 0, (out, p.stderr.decode())
    assert "6 rollouts in" in out and "lost to infra 0" in out, out
    assert PYTHON  # the example uses the python layer of the test store
