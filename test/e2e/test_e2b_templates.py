# E2B's template build API (issue 27) on the Dockerfile builder: the
# unmodified `e2b` SDK builds a template from busybox with WORKDIR, COPY (a
# glob and a file, uploaded through the node's signed link), ENV and RUN,
# checks exists and tags, creates sandboxes from tags and reads the files
# and env the build made; a rebuild is cached; what dsec does not build is
# refused by name; a template from `base` holds both of its layers. The node
# runs on a temp store seeded with the test store's busybox and E2B base
# layers (hard links), so build layers never reach the shared test store. test/e2e/e2b/templates.mjs is plain E2B code.

import json
import os
import shutil
import tempfile
import uuid

import pytest

from dsec_harness import BUSYBOX, STORE, TMP_ROOT, _finish_node, wait_for
from test_e2b import API_KEY, e2b_module, key_file, keyed_node, run_js  # noqa: F401 (fixtures)


def seed_store(path, refs):
    """A store holding the test store's `refs` (hard links: read only)."""
    os.makedirs(os.path.join(path, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(path, "tmp"), exist_ok=True)
    with open(os.path.join(STORE, "catalog.json")) as f:
        layers = json.load(f)["layers"]
    for ref in refs:
        blob = "sha256-" + layers[ref]["digest"].split(":")[1] + ".erofs"
        src, dst = os.path.join(STORE, "blobs", blob), os.path.join(path, "blobs", blob)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    with open(os.path.join(path, "catalog.json"), "w") as f:
        json.dump({"version": 1, "layers": {r: layers[r] for r in refs}}, f)
    return path


@pytest.fixture(scope="module")
def tnode(dsec_bin, key_file, e2b_base):  # noqa: F811 (fixture)
    root = tempfile.mkdtemp(prefix="dsec-e2btpl-", dir=TMP_ROOT)
    n = keyed_node(dsec_bin, seed_store(os.path.join(root, "store"),
                                        [BUSYBOX, e2b_base, "toolkit/e2b-sudo@1"]), key_file)
    yield n
    _finish_node(n)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def context():
    d = tempfile.mkdtemp(prefix="dsec-e2btpl-ctx-", dir=TMP_ROOT)
    os.makedirs(os.path.join(d, "folder"))
    with open(os.path.join(d, "folder", "test.txt"), "w") as f:
        f.write("This is a test file.\n")
    with open(os.path.join(d, "hello.txt"), "w") as f:
        f.write("hello from the context\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def name():
    return "tpl-" + uuid.uuid4().hex[:10]


def templates(module, node, part, **env):
    return run_js(module, node, "templates", PART=part, **env)


def build_sandboxes(node):
    _, out = node.client.call("GET", "/v1/sandboxes")
    items = out if isinstance(out, list) else out.get("sandboxes", [])
    return [s for s in items if s.get("labels", {}).get("dsec-build")]


def test_build_exists_tags_and_create(e2b_module, tnode, context, name):  # noqa: F811
    out = templates(e2b_module, tnode, "build", NAME=name, CONTEXT=context)
    assert out["ok"]
    print(f"first build: {out['ms']} ms")
    # The build's step sandboxes are gone; its work directory too.
    assert wait_for(lambda: not build_sandboxes(tnode), 30)
    assert not [p for p in os.listdir(os.path.join(tnode.store, "tmp")) if p.startswith("e2b-build-")]
    # The template is a layer of the store, and its tags are recorded there.
    with open(os.path.join(tnode.store, "e2b_templates.json")) as f:
        record = json.load(f)
    assert sorted(record[name]) == ["latest", "prod", "v1"]
    layer = record[name]["v1"]["layer"]
    assert layer.startswith(f"e2b/{name}@v1.")
    with open(os.path.join(tnode.store, "catalog.json")) as f:
        assert layer in json.load(f)["layers"]


def test_rebuild_is_cached(e2b_module, tnode, context, name):  # noqa: F811
    out = templates(e2b_module, tnode, "rebuild", NAME=name, CONTEXT=context)
    assert out["ok"]
    # Every COPY and RUN step, and the flattened result, came from the cache.
    assert out["cached"] >= 4, out
    print(f"cached rebuild: {out['ms']} ms")


def test_refused_by_name(e2b_module, tnode, context, name):  # noqa: F811
    out = templates(e2b_module, tnode, "refused", NAME=name + "-bad", CONTEXT=context)
    assert "only images in a registry this node reaches" in out["hub"], out
    assert "not supported by dsec" in out["start"], out
    assert wait_for(lambda: not build_sandboxes(tnode), 30)


def test_bad_requests_over_http(tnode, name):
    c = tnode.client
    status, req = c.call("POST", "/v3/templates", {"name": f"{name}-raw", "cpuCount": 1})
    assert status == 202, req
    tid, bid = req["templateID"], req["buildID"]
    for steps, named in [([{"type": "HEALTHCHECK", "args": []}], "HEALTHCHECK"),
                         ([{"type": "RUN", "args": ["true"], "mystery": 1}], "mystery"),
                         ([{"type": "COPY", "args": ["a", "/b"], "filesHash": "x"}], "filesHash")]:
        status, out = c.call("POST", f"/v2/templates/{tid}/builds/{bid}",
                             {"fromTemplate": "busybox", "steps": steps})
        assert status == 400 and named in out["message"], out
    # A COPY whose files were never uploaded fails the build, naming them.
    status, out = c.call("POST", f"/v2/templates/{tid}/builds/{bid}",
                         {"fromTemplate": "busybox",
                          "steps": [{"type": "COPY", "args": ["a.txt", "/a.txt"],
                                     "filesHash": "ab" * 32}]})
    assert status == 202, out

    def finished():
        s, st = c.call("GET", f"/templates/{tid}/builds/{bid}/status")
        return st if st["status"] in ("ready", "error") else None

    st = wait_for(finished, 60)
    assert st["status"] == "error" and "never uploaded" in st["reason"]["message"], st
    assert st["reason"]["step"] == "1", st
    # Started once only; unknown builds, templates and names are 404.
    status, out = c.call("POST", f"/v2/templates/{tid}/builds/{bid}", {"fromTemplate": "busybox"})
    assert status == 409, out
    status, out = c.call("GET", f"/templates/{tid}/builds/nope/status")
    assert status == 404 and "nope" in out["message"], out
    status, out = c.call("GET", f"/templates/aliases/{name}-none")
    assert status == 404, out
    status, out = c.call("GET", f"/templates/{name}-none/tags")
    assert status == 404, out
    status, out = c.call("POST", "/v2/sandboxes", {"templateID": f"{name}:no-such-tag"})
    assert status >= 400, out
    # An upload without the node's signature is refused.
    status, _, body = c.raw("PUT", f"/templates/{tid}/files/{'cd' * 32}?signature=forged")
    assert status == 401, body
    # Names that are dsec's own templates are taken.
    status, out = c.call("POST", "/v3/templates", {"name": "busybox"})
    assert status == 400 and "built-in" in out["message"], out


def sandboxes_of_template(node, template):
    _, out = node.client.call("GET", "/v1/sandboxes")
    items = out if isinstance(out, list) else out.get("sandboxes", [])
    return [s for s in items if s.get("labels", {}).get("e2b.template") == template]


def test_start_command(e2b_module, tnode, context, name):  # noqa: F811
    """setStartCmd: every sandbox of the template starts the command (a
    busybox httpd) as the template's user, in its workdir, with its env, and
    answers once the ready command succeeds; a ready command that never does
    fails the create within the sandbox's timeout and leaves nothing."""
    out = templates(e2b_module, tnode, "startbuild", NAME=name, CONTEXT=context)
    assert "no-such-server" in out["failing"], out
    with open(os.path.join(tnode.store, "e2b_templates.json")) as f:
        record = json.load(f)
    assert record[f"{name}-start"]["v1"]["startCmd"].startswith("echo"), record
    assert record[f"{name}-never"]["v1"]["readyCmd"] == '[ -z "$FAIL_READY" ]', record
    assert f"{name}-failing" not in record, record
    out = templates(e2b_module, tnode, "startcreate", NAME=name)
    print(f"create with a start command: {out['createMs']} ms; "
          f"a never-ready create failed in {out['failMs']} ms")
    assert wait_for(lambda: not sandboxes_of_template(tnode, f"{name}-never:v1"), 30)


def test_child_template_runs_the_parents_start_command(e2b_module, tnode, context, name):  # noqa: F811
    """fromTemplate of a template with setStartCmd: a child that sets none
    records and runs the parent's start and ready commands; a child's own
    setStartCmd replaces them."""
    parent = f"{name}-start"
    path = os.path.join(tnode.store, "e2b_templates.json")
    if not os.path.exists(path) or parent not in json.load(open(path)):
        templates(e2b_module, tnode, "startbuild", NAME=name, CONTEXT=context)
    templates(e2b_module, tnode, "inherit", NAME=name)
    with open(os.path.join(tnode.store, "e2b_templates.json")) as f:
        record = json.load(f)
    for k in ("startCmd", "readyCmd"):
        assert record[f"{name}-child"]["v1"][k] == record[parent]["v1"][k], record
    assert record[f"{name}-own"]["v1"]["startCmd"] == "exec sleep 100000", record


def test_template_from_base_holds_its_layers(e2b_module, tnode, name):  # noqa: F811
    """fromTemplate('base') (and E2B's fromBaseImage, the same base): the
    template is built over both of base's layers, so its sandboxes have E2B's
    user and its passwordless sudo."""
    templates(e2b_module, tnode, "frombase", NAME=name)


def build_status(node, tid, bid):
    return node.client.call("GET", f"/templates/{tid}/builds/{bid}/status")


def test_restart_keeps_templates_and_builds(e2b_module, tnode, context, name):  # noqa: F811
    """After a node restart: the templates' names, tags and builds' status
    answer as before, creates by name work (start commands too); a build
    running at the stop is an error saying so; a corrupt builds record is
    reported, moved aside, and the node starts without it."""
    c = tnode.client
    with open(os.path.join(tnode.store, "e2b_templates.json")) as f:
        bid = json.load(f)[name]["v1"]["buildID"]
    status, before = build_status(tnode, name, bid)
    assert status == 200 and before["status"] == "ready", before
    # A build still running when the node stops.
    status, req = c.call("POST", "/v3/templates", {"name": f"{name}-slow"})
    assert status == 202, req
    slow = req["buildID"]
    status, out = c.call("POST", f"/v2/templates/{name}-slow/builds/{slow}",
                         {"fromTemplate": "busybox",
                          "steps": [{"type": "RUN", "args": ["sleep 300"]}]})
    assert status == 202, out
    assert wait_for(lambda: "Step 1" in " ".join(build_status(tnode, f"{name}-slow", slow)[1]["logs"]), 60)
    tnode.stop_ok()
    tnode.start()

    status, after = build_status(tnode, name, bid)
    assert status == 200, after
    assert after["status"] == "ready" and after["logs"] == before["logs"], after
    status, out = c.call("GET", f"/templates/aliases/{name}")
    assert status == 200, out
    status, info = c.call("GET", f"/templates/{name}")
    assert status == 200 and info["templateID"] == name, info
    assert {b["buildID"]: b["status"] for b in info["builds"]}.get(bid) == "ready", info
    status, tags = c.call("GET", f"/templates/{name}/tags")
    assert status == 200 and sorted(t["tag"] for t in tags) == ["latest", "prod", "v1", "v2"], tags
    status, sb = c.call("POST", "/v2/sandboxes", {"templateID": f"{name}:prod"})
    assert status == 201, sb
    status, out = c.call("DELETE", f"/v2/sandboxes/{sb['sandboxID']}")
    assert status == 204, out
    status, st = build_status(tnode, f"{name}-slow", slow)
    assert status == 200 and st["status"] == "error", st
    assert "node stopped during this build" in st["reason"]["message"], st
    # Its step sandbox outlived the stop; the restarted node destroys it.
    assert wait_for(lambda: not build_sandboxes(tnode), 30)
    assert wait_for(lambda: "step sandboxes of builds the last stop cut short" in tnode.log_tail(400), 10)
    print(f"a build interrupted by a restart: {st['reason']['message']}")
    out = templates(e2b_module, tnode, "startcreate", NAME=name)
    assert out["ok"]

    # A corrupt builds record: reported and moved aside, never a crash.
    tnode.stop_ok()
    path = os.path.join(tnode.state_dir, "e2b_template_builds.json")
    with open(path, "w") as f:
        f.write("{not json")
    tnode.start()
    status, out = c.call("GET", f"/templates/aliases/{name}")
    assert status == 200, out
    status, out = build_status(tnode, name, bid)
    assert status == 404, out
    assert os.path.exists(path + ".corrupt")
    assert wait_for(lambda: "e2b_template_builds.json is corrupt" in tnode.log_tail(400), 10)
    os.unlink(path + ".corrupt")


def test_delete_template(e2b_module, tnode, name):  # noqa: F811
    c = tnode.client
    status, _, body = c.raw("DELETE", f"/templates/{name}")
    assert status == 204, body
    status, out = c.call("GET", f"/templates/aliases/{name}")
    assert status == 404, out
    status, out = c.call("POST", "/v2/sandboxes", {"templateID": f"{name}:prod"})
    assert status >= 400, out
