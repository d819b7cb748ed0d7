# The node's sandbox volume (sys/quota_volume.hpp) against a host disk that
# fills up or is small: every block of its image is allocated on the host, so
# a full host disk never turns it read-only; it grows as sandboxes write.
# Each test puts the node's state dir on a small loop-mounted ext4 of its own.

import os
import subprocess
import tempfile

import pytest

from dsec_harness import TMP_ROOT, Node, assert_clean, wait_for

MiB = 1 << 20


@pytest.fixture
def small_disk():
    """Returns a function that makes an ext4 of `mb` MiB, mounted; all unmounted after."""
    made = []

    def make(mb):
        root = tempfile.mkdtemp(prefix="dsec-smalldisk-", dir=TMP_ROOT)
        image, mnt = os.path.join(root, "disk.img"), os.path.join(root, "mnt")
        os.mkdir(mnt)
        with open(image, "wb") as f:
            f.truncate(mb * MiB)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", image], check=True)
        subprocess.run(["mount", "-o", "loop", image, mnt], check=True)
        made.append((root, mnt))
        return mnt

    yield make
    for root, mnt in made:
        # Recursive: a node that failed may have left its sandbox volume mounted.
        subprocess.run(["umount", "-R", "-l", mnt], check=False)
        subprocess.run(["rm", "-rf", root], check=False)


def node_on(dsec_bin, store, mnt):
    n = Node(dsec_bin, store)
    os.rmdir(n.state_dir)
    os.unlink(n.log_path) if os.path.exists(n.log_path) else None
    n.state_dir = os.path.join(mnt, "state")
    os.mkdir(n.state_dir, 0o700)
    n.log_path = os.path.join(mnt, "node.log")
    return n.start()


def finish(n):
    n.client.cleanup()
    n.stop_ok()
    assert_clean(n, allow_layer_mounts=False)


def fill(path):
    """Takes every free block of the file system at `path`'s directory."""
    st = os.statvfs(os.path.dirname(path))
    with open(path, "wb") as f:
        try:
            os.posix_fallocate(f.fileno(), 0, max(st.f_bavail * st.f_frsize, 4096))
        except OSError:
            pass
    try:
        with open(path, "ab") as f:
            while True:
                f.write(b"\0" * MiB)
    except OSError:
        pass


def volume_mount_options(n):
    want = os.path.realpath(os.path.join(n.state_dir, "sandboxes"))
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, point, fstype, opts = line.split()[:4]
            if point == want:
                return fstype, opts.split(",")
    return None, []


def test_a_full_host_disk_refuses_creates_and_sandboxes_keep_writing(dsec_bin, store,
                                                                   small_disk):
    mnt = small_disk(1536)
    n = node_on(dsec_bin, store, mnt)
    try:
        image = os.path.join(n.state_dir, "sandboxes.img")
        st = os.stat(image)
        assert st.st_blocks * 512 >= st.st_size, "the sandbox volume's image is sparse"
        c = n.client
        sid = c.create_ok(disk_mb=300)
        c.sh(sid, "dd if=/dev/zero of=/root/before bs=1M count=20 && sync")

        fill(os.path.join(mnt, "filler"))
        status, out = c.create()
        assert status == 429, f"create on a full host disk: {status} {out}"
        assert "full" in out["error"]["message"], out
        # The sandbox writes on: its volume's blocks are its own, and btrfs
        # never meets the full host disk (before, it turned read-only here).
        r = c.sh(sid, "dd if=/dev/zero of=/root/after bs=1M count=60 2>&1 && sync && "
                      "du -m /root/after | cut -f1", timeout_s=60)
        assert r["exit_code"] == 0, r
        assert int(r["stdout"].split()[-1]) >= 59, r
        fstype, opts = volume_mount_options(n)
        assert fstype == "btrfs" and "rw" in opts, (fstype, opts)

        os.unlink(os.path.join(mnt, "filler"))
        sid2 = c.create_ok()
        c.sh(sid2, "echo fresh > /root/f && cat /root/f")
        finish(n)
    finally:
        if n.alive():
            n.stop()


def test_the_volume_grows_past_its_first_size_as_a_sandbox_writes(dsec_bin, store, small_disk):
    # 6 GiB of host disk: the volume may grow to about 3 GiB and starts at 2.
    mnt = small_disk(6144)
    n = node_on(dsec_bin, store, mnt)
    try:
        image = os.path.join(n.state_dir, "sandboxes.img")
        assert os.stat(image).st_size == 2048 * MiB
        sid = n.client.create_ok(disk_mb=2800)
        # Steady writes (100 MiB, synced, at a time): 1.6 GiB is more than the
        # volume holds before it grows (it grows with 1 GiB left).
        r = n.client.sh(sid, "for i in $(seq 16); do dd if=/dev/zero of=/root/f$i bs=1M "
                             "count=100 2>&1 | tail -1 || exit 1; sync; done; du -sm /root | "
                             "cut -f1", timeout_s=300)
        assert r["exit_code"] == 0, r
        assert int(r["stdout"].split()[-1]) >= 1600, r
        assert os.stat(image).st_size > 2048 * MiB, "the volume did not grow"
        st = os.stat(image)
        assert st.st_blocks * 512 >= st.st_size, "the grown image is sparse"
        wait_for(lambda: "sandbox volume grew" in n.log_tail(400), 5,
                 what="the node's log line on growth")
        finish(n)
    finally:
        if n.alive():
            n.stop()
