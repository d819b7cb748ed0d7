# The security suite's fixtures. test/security is the one home of dsec's
# security tests: the red-team attacks (threat table below), the isolation,
# seccomp, protected-path, network allow-list and file-API escape checks
# (test_isolation.py, test_seccomp.py, test_protect.py, test_network.py,
# test_file_api_escape.py), and in C++ the privileged container and eBPF
# policy tests (container_security_test.cpp, net_policy_test.cpp; meson
# suite `security`).
#
# Red-team tests (issue 6) run one attack from inside a sandbox, assert that
# it failed the way it should, then that nothing else was harmed (the
# `unharmed` fixture): the node answers /healthz, a NEIGHBOUR sandbox created
# before the attack still execs and keeps its files, and host files planted
# by the suite are unchanged (or, for files that must not appear, absent).
#
# The node fixtures come from the shared harness test/pylib/dsec_harness.py
# (also test/e2e's): one `dsec node` per test module, the REST client,
# DSEC_BIN / DSEC_TEST_STORE / DSEC_E2E_TMP as documented there.
#
# Threat -> test:
#   resources  fork bomb, memory bomb (processes and tmpfs), disk fill,
#              inode fill, open files, CPU            test_resources.py
#   /proc      /proc/*/root, fd walk, open_by_handle_at, sysrq, masked
#              paths and kallsyms, host info           test_proc.py
#   files      lower-layer and protected writes, symlink-swap race and
#              special files against the file API       test_fs.py
#   processes  ptrace/kill of init and of a neighbour, /proc/*/exe,
#              TIOCSTI/TIOCLINUX, seccomp + no_new_privs on every thread,
#              the denied syscalls, 32-bit and x32 entry  test_process.py
#   channel    init not dumpable, no socket to reach    test_channel.py
#   fds        inherited descriptors, node environment  test_fds.py
#   egress     raw sockets, the node's ports            test_net.py
#   floods     `yes` on exec, background, PTY, FnCall; the node-wide
#              output budget and RSS after               test_output_flood.py
#   scans      the node's subnet and the host: one event  test_port_scan.py
#   kpage      /proc/kpage* masks on every path, grep /  test_kpage.py
#   sudo       E2B base's sudo socket: a root exec's privileges, nothing more;
#              refusal at accept, malformed requests      test_sudo.py
#   mirrors    another host through an allowed mirror    test_mirror_fetch.py
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pylib"))

from dsec_harness import (  # noqa: E402,F401  fixtures pytest finds here by name
    Node, _finish_node, client, dsec_bin, dsec_sdk, node_factory, pytest_runtest_makereport,
    sandbox, sdk, sdk_client, skip_unless_root, store)

from .redteam import Client, HostFiles, Neighbour, PYTHON  # noqa: E402

SECURITY_DIR = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def node(dsec_bin, store):
    """One node per test module (as in e2e), named redteam-*."""
    n = Node(dsec_bin, store, node_id=f"redteam-{uuid.uuid4().hex[:6]}").start()
    yield n
    _finish_node(n)


def pytest_collection_modifyitems(config, items):
    skip_unless_root(items, SECURITY_DIR, "the security suite")


@pytest.fixture(scope="module")
def neighbour(node):
    # Its own client: the per-test `client` fixture deletes what node.client
    # created during a test, and the neighbour must outlive every test.
    c = Client("127.0.0.1", node.rest_port)
    n = Neighbour(c, node.node_id)
    yield n
    if node.alive():
        c.cleanup()


@pytest.fixture(scope="module")
def host_files(node, dsec_bin, neighbour):  # after it: its layers are mounted
    h = HostFiles(node, dsec_bin)
    yield h
    h.remove()


@pytest.fixture
def unharmed(node, client, neighbour, host_files):
    """Call after the attack: the node, the neighbour and the host are intact."""
    def check():
        assert node.alive(), f"node died:\n{node.log_tail()}"
        status, body = client.healthz(timeout=10)
        assert status == 200, f"/healthz after the attack: {status} {body}"
        neighbour.check()
        host_files.check()
    return check


@pytest.fixture
def py(client):
    """A fresh python sandbox for one attack (deleted after the test)."""
    return client.create_ok([PYTHON], memory_mb=256)
