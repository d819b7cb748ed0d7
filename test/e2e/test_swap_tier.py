# The node's swap tier (sys/swap_tier.hpp): a disk swap file (--swap-file-mb,
# fallocate'd, swapped on above zram) with zswap in front (--zswap-compressor,
# default lzo; --zswap-pool-percent). A second node joins it; a node killed
# with -9 and restarted takes it back and sets zswap again; the last node that
# stops cleanly swaps the file off, removes it and puts back every zswap
# parameter it changed. Bad settings stop the node with a message and leave the
# host as it was. --zram-mb 0 alone (what the suite's nodes run with) means no
# node-managed swap at all.
#
# These tests change the host's swap and zswap: each starts only when the host
# has no swap other than dsec's zram and no other node holds a tier (the record
# /run/dsec/swaptier), and leaves the host as it found it.
import os
import re
import shutil
import signal
import subprocess
import tempfile

import pytest

from dsec_harness import CGROUP_ROOTS, PYTHON, Node, TMP_ROOT, wait_for

RECORD = "/run/dsec/swaptier"
ZSWAP = "/sys/module/zswap/parameters"
PARAMS = ("enabled", "compressor", "max_pool_percent")


def active_swaps():
    with open("/proc/swaps") as f:
        return [line.split()[0] for line in f.read().splitlines()[1:] if line.strip()]


def dsec_zram():
    try:
        with open("/run/dsec/zram") as f:
            for line in f:
                if line.startswith("device "):
                    return "/dev/" + line.split()[1]
    except OSError:
        pass
    return None


def zswap_params():
    return {k: open(f"{ZSWAP}/{k}").read().strip() for k in PARAMS}


@pytest.fixture
def host():
    """The host has no swap of its own and no dsec tier: these tests own both.
    Yields a fresh --swap-dir; afterwards nothing of the tier is left."""
    if not os.path.exists(ZSWAP + "/enabled"):
        pytest.skip(f"this kernel has no zswap ({ZSWAP} missing)")
    others = [s for s in active_swaps() if s != dsec_zram()]
    if others:
        pytest.skip(f"the host has swap {others}: a node would use it, not make a tier")
    if os.path.exists(RECORD):
        pytest.skip(f"another dsec node on this host holds the swap tier ({RECORD})")
    before = zswap_params()
    d = tempfile.mkdtemp(prefix="dsec-swaptier-", dir=TMP_ROOT)
    swap_dir = os.path.join(d, "swap")
    yield {"dir": swap_dir, "file": os.path.join(swap_dir, "swapfile"), "zswap": before}
    # Whatever a failed test left: never leave a swap of ours or zswap changed.
    leftovers = []
    if os.path.join(swap_dir, "swapfile") in active_swaps():
        leftovers.append("swap file still swapped on")
        subprocess.run(["swapoff", os.path.join(swap_dir, "swapfile")])
    if zswap_params() != before:
        leftovers.append(f"zswap {zswap_params()} (was {before})")
        for k in ("compressor", "max_pool_percent", "enabled"):
            with open(f"{ZSWAP}/{k}", "w") as f:
                f.write(before[k])
    if os.path.exists(RECORD):
        leftovers.append("record " + RECORD)
        os.unlink(RECORD)
    shutil.rmtree(d, ignore_errors=True)
    assert not leftovers, leftovers


def tier_args(h, mb=256, *more):
    return ["--zram-mb", "0", "--swap-file-mb", str(mb), "--swap-dir", h["dir"], *more]


def tier_line(node):
    m = re.findall(r"swap tier: (made|joined|took back) swap file (\S+) \((\d+) MiB", node.log_tail(400))
    assert m, f"no swap tier line in the log of {node.node_id}:\n{node.log_tail()}"
    return m[-1]


def stop_and_clean(node):
    node.stop_ok()
    node.remove_state()


def assert_host_restored(h):
    assert h["file"] not in active_swaps()
    assert not os.path.exists(h["file"]), "the swap file was left on disk"
    assert zswap_params() == h["zswap"], "zswap's parameters were not put back"
    assert not os.path.exists(RECORD)


def test_node_makes_the_tier_and_its_clean_stop_puts_the_host_back(dsec_bin, store, host):
    n = Node(dsec_bin, store, extra_args=tier_args(host, 256)).start()
    try:
        verb, path, mb = tier_line(n)
        assert (verb, path, mb) == ("made", host["file"], "256")
        with open("/proc/swaps") as f:
            line = next(l for l in f if l.startswith(host["file"]))
        assert line.split()[1] == "file" and int(line.split()[4]) == 200, line
        st = os.stat(host["file"])
        assert st.st_size == 256 << 20
        assert st.st_blocks * 512 >= st.st_size, "the swap file is sparse"
        assert zswap_params() == {"enabled": "Y", "compressor": "lzo",
                                  "max_pool_percent": "40"}
        assert "was enabled=%s %s %s%%" % (host["zswap"]["enabled"], host["zswap"]["compressor"],
                                           host["zswap"]["max_pool_percent"]) in n.log_tail()
        status, health = n.client.healthz()
        assert status == 200
        t = health["swap_tier"]
        assert t["active"] is True and t["file"] == host["file"], t
        assert t["zswap_compressor"] == "lzo", t
        assert t["file_bytes"] > 250 << 20, t
        status, text = n.client.call("GET", "/metrics")
        text = text.decode() if isinstance(text, bytes) else text
        for name in ("dsec_swap_file_used_bytes", "dsec_zswap_pool_bytes",
                     "dsec_zswap_stored_bytes"):
            assert f'{name}{{node="{n.node_id}"}}' in text, name
    finally:
        stop_and_clean(n)
    assert_host_restored(host)


def test_a_second_node_joins_the_tier_and_the_last_one_out_puts_zswap_back(
        dsec_bin, store, host):
    a = Node(dsec_bin, store, extra_args=tier_args(host, 256)).start()
    b = None
    try:
        b = Node(dsec_bin, store, extra_args=tier_args(host, 512, "--zswap-compressor", "deflate")).start()
        verb, path, mb = tier_line(b)
        assert (verb, path, mb) == ("joined", host["file"], "256"), "a second file was made"
        assert "zswap joined: lzo" in b.log_tail(), "the joiner changed the first's zswap"
        stop_and_clean(a)
        assert host["file"] in active_swaps(), "the first node took the tier from the second"
        assert zswap_params()["enabled"] == "Y"
    finally:
        if a.alive():
            stop_and_clean(a)
        if b is not None:
            stop_and_clean(b)
    assert_host_restored(host)


def test_a_node_killed_with_minus_9_takes_its_tier_back_and_sets_zswap_again(
        dsec_bin, store, host):
    n = Node(dsec_bin, store, extra_args=tier_args(host, 256)).start()
    try:
        ino = os.stat(host["file"]).st_ino
        n.proc.send_signal(signal.SIGKILL)
        n.proc.wait()
        assert host["file"] in active_swaps()  # nothing ran at the kill
        # As if the kill came in the middle of a pause, which has zswap off.
        with open(ZSWAP + "/enabled", "w") as f:
            f.write("N")
        n.start()  # same node id and state dir
        verb, path, _ = tier_line(n)
        assert (verb, path) == ("took back", host["file"])
        assert os.stat(host["file"]).st_ino == ino, "the file was made anew"
        assert zswap_params()["enabled"] == "Y"
    finally:
        stop_and_clean(n)
    assert_host_restored(host)


@pytest.mark.parametrize("args,rc,words", [
    (["--zswap-compressor", "gzip"], 2, "not a compressor zswap can use"),
    (["--zswap-pool-percent", "0"], 2, "must be 1..90"),
    (["--swap-file-mb", "-5"], 2, "--swap-file-mb must be a whole number"),
    (["--swap-dir", "relative/dir"], 2, "--swap-dir must be an absolute path"),
    (["--swap-order", "disk-first"], 2, "--swap-order must be file-first"),
])
def test_bad_swap_flags_are_refused_with_a_message(dsec_bin, tmp_path, args, rc, words):
    p = subprocess.run([dsec_bin, "node", "--state-dir", str(tmp_path), *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == rc, p.stderr
    assert words.encode() in p.stderr, p.stderr


def test_settings_the_host_cannot_meet_stop_the_node_and_leave_the_host_as_it_was(
        dsec_bin, store, host, tmp_path):
    with open("/proc/crypto") as f:
        names = {l.split(":", 1)[1].strip() for l in f if l.startswith("name")}
    cases = [(["--swap-file-mb", str(1 << 30)], "MiB free, and the swap file must leave")]
    missing = next((c for c in ("zstd", "lz4", "842") if c not in names), None)
    if missing:
        cases.append((["--zswap-compressor", missing], f"has no {missing}"))
    for extra, words in cases:
        state = tmp_path / extra[0].strip("-")
        state.mkdir()
        node_id = "e2e-bad-" + os.urandom(3).hex()
        p = subprocess.run([dsec_bin, "node", "--state-dir", str(state), "--store", store,
                            "--rest", "127.0.0.1:0", "--listen", "127.0.0.1:0",
                            "--node-id", node_id, *tier_args(host, 256), *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        assert p.returncode != 0, p.stdout
        assert words.encode() in p.stdout, p.stdout
        assert_host_restored(host)
        # Nor any cgroup of the node, in any hierarchy (v2 included).
        left = [os.path.join(r, "dsec", node_id) for r in CGROUP_ROOTS.values()
                if os.path.exists(os.path.join(r, "dsec", node_id))]
        assert not left, left


def test_zram_mb_0_alone_means_no_node_managed_swap(dsec_bin, store, host):
    swaps = active_swaps()
    n = Node(dsec_bin, store).start()  # the suite's default: --zram-mb 0
    try:
        assert "swap tier: off (no swap file and no zram" in n.log_tail()
        assert n.client.healthz()[1]["swap_tier"]["active"] is False
        assert active_swaps() == swaps
        assert zswap_params() == host["zswap"]
    finally:
        stop_and_clean(n)


def test_with_zram_too_the_file_comes_first_and_zswap_sits_in_front(dsec_bin, store, host):
    n = Node(dsec_bin, store, extra_args=["--zram-mb", "256", "--swap-file-mb", "256",
                                          "--swap-dir", host["dir"]]).start()
    try:
        assert tier_line(n)[1] == host["file"]
        prio = {l.split()[0]: int(l.split()[4]) for l in open("/proc/swaps").read().splitlines()[1:]}
        zram = dsec_zram()
        assert zram in prio, f"no dsec zram in {prio}:\n{n.log_tail()}"
        assert prio[host["file"]] > prio[zram], prio
        assert zswap_params()["enabled"] == "Y"
        assert "pause goes past zswap, to the file" in n.log_tail()
        # A node that asks nothing of the tier does not join it.
        m = Node(dsec_bin, store, extra_args=["--zram-mb", "256", "--swap-file-mb", "0",
                                              "--zswap-compressor", "off"]).start()
        try:
            assert "swap tier: off (--swap-file-mb 0 and --zswap-compressor off)" in m.log_tail()
        finally:
            stop_and_clean(m)
        assert host["file"] in active_swaps()
    finally:
        stop_and_clean(n)
    assert_host_restored(host)


def test_swap_order_zram_first_puts_the_file_below_zram(dsec_bin, store, host):
    # Density (README, 3,200 python agents): compressed RAM takes pages first
    # and the disk file only what zram cannot hold; zswap stays off.
    n = Node(dsec_bin, store, extra_args=["--zram-mb", "256", "--swap-file-mb", "256",
                                          "--swap-dir", host["dir"], "--swap-order", "zram-first",
                                          "--zswap-compressor", "off"]).start()
    try:
        assert tier_line(n)[1] == host["file"]
        prio = {l.split()[0]: int(l.split()[4]) for l in open("/proc/swaps").read().splitlines()[1:]}
        zram = dsec_zram()
        assert zram in prio, f"no dsec zram in {prio}:\n{n.log_tail()}"
        assert prio[host["file"]] < prio[zram], prio
        assert zswap_params() == host["zswap"]
    finally:
        stop_and_clean(n)
    assert_host_restored(host)


def test_reclaim_into_the_file_leaves_no_swap_cache_behind(dsec_bin, store, host):
    # A page-out into a disk file writes asynchronously: each page stays in the
    # swap cache, charged to the sandbox and invisible to MemAvailable, until
    # reclaim drops it. The reclaim actor drops it, and counts it while it is there.
    n = Node(dsec_bin, store, extra_args=[*tier_args(host, 512), "--zswap-compressor", "off",
                                          "--reclaim-idle-s=2", "--reclaim-interval-ms=250"]).start()
    try:
        c = n.client
        sid = c.create_ok([PYTHON], memory_mb=512)
        c.sh(sid, "python3 -c \"import os, time; b = os.urandom(100 << 20); print(len(b), "
                  "flush=True); time.sleep(3600)\" > /tmp/hold.out 2>&1 &")
        wait_for(lambda: c.sh(sid, "cat /tmp/hold.out")["stdout"].strip() == str(100 << 20), 60,
                 what="the python process to hold 100 MiB")

        def info():
            status, out = c.get(sid)
            assert status == 200, out
            return out
        wait_for(lambda: info()["reclaimed_bytes"] > 50 << 20, 60, interval=0.5,
                 what="reclaim of the idle sandbox into the file")
        stat = os.path.join(CGROUP_ROOTS["memory"], "dsec", n.node_id, sid, "memory.stat")

        def field(name):
            with open(stat) as f:
                return next(int(l.split()[1]) for l in f if l.split()[0] == name)
        assert field("total_swap") > 50 << 20, "the heap did not go to the swap file"
        assert field("total_swapcached") < 8 << 20, "the page-out left its swap cache in RAM"
        got = info()
        assert got["resident_bytes"] < 30 << 20, got
        r = c.sh(sid, "cat /tmp/hold.out")
        assert r["exit_code"] == 0 and r["stdout"].strip() == str(100 << 20), r
        c.delete(sid)
    finally:
        stop_and_clean(n)
    assert_host_restored(host)
