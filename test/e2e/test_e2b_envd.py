# envd 0.6 (issue 27): a sandbox claims envd 0.6.4, and what the SDK unlocks
# with it works. Through the unmodified `e2b` SDK (test/e2e/e2b/envd06.mjs):
# file metadata kept as user.e2b.* extended attributes, gzip and octet-stream
# uploads, watch events with their entry. Over plain HTTP: the version the
# control plane answers, and uploads dsec refuses by name before anything is
# written (a bad metadata key or value, a corrupt gzip body, an encoding it
# does not speak).

import gzip
import json

import pytest

from test_e2b import e2b_module, e2b_node, key_file, run_js  # noqa: F401 (fixtures)

ENVD_VERSION = "0.6.4"


def envd06(module, node, part):
    return run_js(module, node, "envd06", PART=part)


def test_a_sandbox_claims_the_envd_version_dsec_implements(e2b_module, e2b_node):
    assert envd06(e2b_module, e2b_node, "version")["envdVersion"] == ENVD_VERSION
    status, sb = e2b_node.client.call("POST", "/v2/sandboxes", {"templateID": "busybox"})
    assert status == 201, sb
    try:
        assert sb["envdVersion"] == ENVD_VERSION
        status, got = e2b_node.client.call("GET", f"/sandboxes/{sb['sandboxID']}")
        assert status == 200 and got["envdVersion"] == ENVD_VERSION, got
    finally:
        e2b_node.client.delete(sb["sandboxID"])


def test_file_metadata_is_kept_as_extended_attributes(e2b_module, e2b_node):
    envd06(e2b_module, e2b_node, "metadata")


def test_gzip_and_octet_stream_uploads(e2b_module, e2b_node):
    envd06(e2b_module, e2b_node, "upload")


def test_watch_events_carry_their_entry(e2b_module, e2b_node):
    envd06(e2b_module, e2b_node, "watch")


@pytest.fixture
def sandbox(e2b_node):
    status, sb = e2b_node.client.call("POST", "/v2/sandboxes", {"templateID": "base"})
    assert status == 201, sb
    yield sb["sandboxID"]
    e2b_node.client.delete(sb["sandboxID"])


def upload(node, sid, path, body, **headers):
    h = {"E2b-Sandbox-Id": sid, "Content-Type": "application/octet-stream"}
    h.update(headers)
    status, _, out = node.client.raw("POST", f"/files?path={path}", body, headers=h)
    return status, json.loads(out) if out else None


def exists(node, sid, path):
    status, _, _ = node.client.raw("GET", f"/files?path={path}", headers={"E2b-Sandbox-Id": sid})
    return status == 200


@pytest.mark.parametrize("headers, named", [
    ({"X-Metadata-Good": "caf\u00e9"}, "good"),  # not printable ASCII
    ({"X-Metadata-Big": "v" * 5000}, "big"),
    ({"Content-Encoding": "br"}, "br"),
    ({"Content-Encoding": "gzip"}, "gzip"),  # the body below is not gzip
])
def test_uploads_refused_by_name_write_nothing(e2b_node, sandbox, headers, named):
    status, out = upload(e2b_node, sandbox, "refused.txt", b"plain bytes", **headers)
    assert status == 400, out
    assert out["code"] == 400 and named in out["message"].lower(), out
    assert not exists(e2b_node, sandbox, "refused.txt")


def test_a_gzip_body_is_stored_inflated_with_its_metadata(e2b_node, sandbox):
    data = b"inflated " * 1000
    status, out = upload(e2b_node, sandbox, "z.txt", gzip.compress(data),
                         **{"Content-Encoding": "gzip", "X-Metadata-Origin": "ci"})
    assert status == 200, out
    assert out == [{"name": "z.txt", "type": "file", "path": "/home/user/z.txt",
                    "metadata": {"origin": "ci"}}]
    status, _, back = e2b_node.client.raw("GET", "/files?path=z.txt",
                                          headers={"E2b-Sandbox-Id": sandbox})
    assert status == 200 and back == data
    # The attribute is a real one, as a tool inside the sandbox sees it.
    got = e2b_node.client.sh(sandbox, ["python3", "-c",
                                       "import os; print(os.getxattr('/home/user/z.txt',"
                                       " 'user.e2b.origin').decode())"])
    assert got["stdout"] == "ci\n", got
