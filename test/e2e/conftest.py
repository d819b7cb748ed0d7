# The e2e suite's pytest wiring: fixtures and the failure-report hook come
# from the shared harness (test/pylib/dsec_harness.py, also used by
# test/security); test modules import its helpers directly.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pylib"))

from dsec_harness import (  # noqa: E402,F401  fixtures pytest finds here by name
    cli, client, dsec_bin, dsec_sdk, node, node_factory, pytest_runtest_makereport, sandbox,
    sdk, sdk_client, skip_unless_root, store)

E2E_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    skip_unless_root(items, E2E_DIR, "dsec e2e")
