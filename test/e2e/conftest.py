# The e2e suite's pytest wiring: fixtures and the failure-report hook come
# from the shared harness (test/pylib/dsec_harness.py, also used by
# test/security); test modules import its helpers directly.
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pylib"))

from dsec_harness import (  # noqa: E402,F401  fixtures pytest finds here by name
    cli, client, dsec_bin, dsec_sdk, node, node_factory, pytest_runtest_makereport, sandbox,
    sdk, sdk_client, skip_unless_root, store)

E2E_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    skip_unless_root(items, E2E_DIR, "dsec e2e")


@pytest.fixture(scope="session")
def e2b_base(dsec_bin, store):
    """base/e2b@1, E2B's `base` template (issue 27): built by `dsec layer defaults --e2b`
    when the store lacks it (a debootstrap of a few minutes, once)."""
    p = subprocess.run([dsec_bin, "layer", "defaults", "--e2b", "--store", store],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    assert p.returncode == 0, f"dsec layer defaults --e2b --store {store}:\n{p.stdout[-3000:]}"
    return "base/e2b@1"
