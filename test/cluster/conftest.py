# The fault harness's pytest wiring (issue 28): the shared fixtures (dsec_bin,
# store) and the failure-report hook from test/pylib, and a module-scoped
# 5-node cluster in network namespaces. Without root or netns support the
# suite does not skip silently: it fails saying what the machine lacks
# (CI is root on a machine that has both).
import os
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "pylib"))
sys.path.insert(0, str(HERE))

from dsec_harness import dsec_bin, pytest_runtest_makereport, store  # noqa: E402,F401

import netns_cluster  # noqa: E402

CLUSTER_SIZE = int(os.environ.get("DSEC_FAULT_NODES", "5"))


@pytest.fixture(scope="module")
def cluster(dsec_bin, store):
    try:
        c = netns_cluster.NetnsCluster(dsec_bin, store, n=CLUSTER_SIZE)
    except netns_cluster.Refused as e:
        pytest.fail(f"fault harness refused to start: {e}", pytrace=False)
    try:
        c.setup()
        wait_joined(c)
    except BaseException:
        c.close()
        raise
    yield c
    errors = c.close()
    if errors:
        pytest.fail("fault harness teardown: " + "; ".join(errors), pytrace=False)


def wait_joined(c, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.converged():
            return
        time.sleep(0.2)
    raise AssertionError("the nodes did not all see each other alive within "
                         f"{timeout}s: " + str({n.node_id: c.states(n) for n in c.nodes}))
