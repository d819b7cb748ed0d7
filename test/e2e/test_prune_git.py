# `dsec layer build --prune-git` (issue 6, the answer-leak defence): a repo
# with a "future" commit holding an answer (on a branch, a tag, a remote ref,
# a reflog entry, ORIG_HEAD, a stash, packed-refs) and a nested repo with its
# own future branch. The built EROFS image is mounted read-only (mount(2) of
# the image file) and inspected with the host's git: exactly one commit, HEAD's
# tree and metadata, no secret in any object, the working tree as in the
# source, the source repo untouched. A control build without the flag must
# expose the secret, so the checks can fail.

import ctypes
import os
import shutil
import subprocess
import tempfile

import pytest

from dsec_harness import TMP_ROOT

SECRET = "THE-ANSWER-h1oci-4f1c9e"
NESTED_SECRET = "NESTED-ANSWER-h1oci-77aa"
MS_RDONLY = 1
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def git(repo, *args, check=True, env_extra=None):
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null", "LC_ALL": "C",
           "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
           "GIT_COMMITTER_NAME": "Bob", "GIT_COMMITTER_EMAIL": "bob@example.com"}
    env.update(env_extra or {})
    p = subprocess.run(["git", "-c", "safe.directory=*", "-C", repo, *args], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if check:
        assert p.returncode == 0, f"git {args}: {p.stderr.decode()}"
    return p.stdout.decode(errors="replace")


def commit(repo, msg, date):
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg,
        env_extra={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def make_repo(root):
    """main at commit A (HEAD); B = the future fix with ANSWER, reachable from
    a branch, a tag, a remote ref, reflogs, ORIG_HEAD; a stash with the secret;
    an uncommitted edit; a nested repo with its own future branch."""
    repo = os.path.join(root, "src")
    os.makedirs(repo)
    git(repo, "init", "-q", "-b", "main")
    write(f"{repo}/code.py", "def f():\n    return 1\n")
    write(f"{repo}/README", "task repo\n")
    commit(repo, "start: the bug\n\nlong body line\n", "2023-05-06T07:08:09+02:00")
    git(repo, "checkout", "-q", "-b", "future")
    write(f"{repo}/ANSWER", f"the fix is {SECRET}\n")
    write(f"{repo}/code.py", f"def f():\n    return 2  # {SECRET}\n")
    commit(repo, f"fix: {SECRET}", "2024-01-01T00:00:00+00:00")
    git(repo, "tag", "-a", "v2", "-m", f"release {SECRET}")
    git(repo, "checkout", "-q", "main")
    b = git(repo, "rev-parse", "future").strip()
    git(repo, "update-ref", "refs/remotes/origin/main", b)
    git(repo, "remote", "add", "origin", "https://example.invalid/upstream.git")
    git(repo, "reset", "-q", "--hard", b)          # reflog + ORIG_HEAD name B
    git(repo, "reset", "-q", "--hard", "HEAD@{1}")
    write(f"{repo}/code.py", f"def f():\n    return 3  # stash {SECRET}\n")
    git(repo, "stash", "-q")
    git(repo, "pack-refs", "--all")
    write(f"{repo}/code.py", "def f():\n    return 1  # WIP edit\n")  # uncommitted
    nested = os.path.join(repo, "vendor", "lib")
    os.makedirs(nested)
    git(nested, "init", "-q", "-b", "trunk")
    write(f"{nested}/lib.txt", "lib v1\n")
    commit(nested, "lib v1", "2022-02-02T02:02:02+00:00")
    git(nested, "checkout", "-q", "-b", "next")
    write(f"{nested}/lib.txt", f"lib v2 {NESTED_SECRET}\n")
    commit(nested, "lib v2", "2022-03-03T03:03:03+00:00")
    git(nested, "checkout", "-q", "trunk")
    return repo


def snapshot(repo):
    """Everything git knows in a repo, to check the source is untouched."""
    return (git(repo, "for-each-ref"), git(repo, "reflog", "--all"),
            git(repo, "cat-file", "--batch-all-objects", "--batch-check"),
            open(os.path.join(repo, "code.py")).read())


class Mounted:
    """The EROFS image of a layer, mounted read-only at a temp dir."""

    def __init__(self, image, where):
        self.dir = tempfile.mkdtemp(prefix="h1-oci-mnt-", dir=where)
        if _libc.mount(image.encode(), self.dir.encode(), b"erofs", MS_RDONLY, None) != 0:
            e = ctypes.get_errno()
            os.rmdir(self.dir)
            raise OSError(e, f"mount erofs {image}: {os.strerror(e)}")

    def close(self):
        _libc.umount2(self.dir.encode(), MNT_DETACH)
        os.rmdir(self.dir)


@pytest.fixture(scope="module")
def work(dsec_bin):
    if shutil.which("git") is None:
        pytest.fail("git is not installed (scripts/deps.sh installs it)")
    d = tempfile.mkdtemp(prefix="h1-oci-prune-", dir=TMP_ROOT)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def build(dsec_bin, src, store, name, *extra):
    p = subprocess.run([dsec_bin, "layer", "build", src, "--name", name, "--version", "1",
                        "--kind", "workspace", "--store", store, *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    ref, digest = p.stdout.decode().split()
    image = os.path.join(store, "blobs", "sha256-" + digest.split(":")[1] + ".erofs")
    assert os.path.isfile(image), image
    return image, p.stderr.decode()


def all_objects(repo):
    return git(repo, "cat-file", "--batch-all-objects", "--batch")


def test_prune_git_leaves_one_commit_and_no_secret(dsec_bin, work):
    repo = make_repo(work)
    store = os.path.join(work, "store")
    before = snapshot(repo)
    head = git(repo, "log", "-1", "--format=%T%n%an <%ae> %aI%n%cn <%ce> %cI%n%B", "main")
    assert SECRET in all_objects(repo)  # the source does leak

    image, err = build(dsec_bin, repo, store, "test/pruned", "--prune-git")
    assert "pruned git history of 2 repositories" in err, err
    assert snapshot(repo) == before, "the source repository was modified"
    assert os.listdir(os.path.join(store, "tmp")) == []

    m = Mounted(image, work)
    try:
        ws = m.dir
        assert git(ws, "rev-list", "--all").strip().count("\n") == 0
        assert len(git(ws, "log", "--all", "--oneline").splitlines()) == 1
        # HEAD's tree, author, committer, dates and message, as a root commit.
        assert git(ws, "log", "-1", "--format=%T%n%an <%ae> %aI%n%cn <%ce> %cI%n%B", "main") == head
        assert git(ws, "log", "-1", "--format=%P").strip() == ""
        assert git(ws, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
        assert git(ws, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]
        assert git(ws, "reflog", "--all").strip() == ""
        assert git(ws, "stash", "list").strip() == ""
        assert git(ws, "config", "--get-regexp", "^remote", check=False).strip() == ""
        assert git(ws, "fsck", "--unreachable", "--dangling", "--no-reflogs",
                   "--no-progress").strip() == ""
        objects = all_objects(ws)
        assert SECRET not in objects and "ANSWER" not in objects, "an object leaks the answer"
        listed = git(ws, "cat-file", "--batch-all-objects", "--batch-check").splitlines()
        reachable = git(ws, "rev-list", "--all", "--objects").splitlines()
        assert len(listed) == len(reachable), (listed, reachable)
        assert git(ws, "grep", "-e", SECRET, "main", check=False).strip() == ""
        gd = os.path.join(ws, ".git")
        for name in ("ORIG_HEAD", "FETCH_HEAD", "packed-refs", "logs", "hooks", "refs/stash"):
            assert not os.path.exists(os.path.join(gd, name)), name
        # The working tree is the source's, uncommitted edit included.
        assert open(os.path.join(ws, "code.py")).read() == "def f():\n    return 1  # WIP edit\n"
        assert not os.path.exists(os.path.join(ws, "ANSWER"))
        assert git(ws, "ls-files").split() == ["README", "code.py"]
        # The nested repository is pruned the same way.
        nested = os.path.join(ws, "vendor", "lib")
        assert git(nested, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/trunk"]
        assert NESTED_SECRET not in all_objects(nested)
        assert open(os.path.join(nested, "lib.txt")).read() == "lib v1\n"
    finally:
        m.close()


def test_without_prune_git_the_secret_is_reachable(dsec_bin, work):
    repo = os.path.join(work, "src")
    if not os.path.isdir(repo):
        repo = make_repo(work)
    store = os.path.join(work, "store")
    image, _ = build(dsec_bin, repo, store, "test/unpruned")
    m = Mounted(image, work)
    try:
        assert SECRET in all_objects(m.dir)
        assert len(git(m.dir, "log", "--all", "--oneline").splitlines()) > 1
    finally:
        m.close()


def test_prune_git_on_a_tree_without_repos_and_bad_input(dsec_bin, work):
    plain = os.path.join(work, "plain")
    write(os.path.join(plain, "a.txt"), "no git here\n")
    store = os.path.join(work, "store2")
    _, err = build(dsec_bin, plain, store, "test/plain", "--prune-git")
    assert "pruned git history of 0 repositories" in err, err
    p = subprocess.run([dsec_bin, "layer", "build", os.path.join(work, "missing"), "--name",
                        "test/x", "--version", "1", "--kind", "workspace", "--store", store,
                        "--prune-git"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 1 and b"[not_found]" in p.stderr, p.stderr
    assert os.listdir(os.path.join(store, "tmp")) == []
