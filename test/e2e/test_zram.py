# The node's compressed swap (sys/zram.hpp): a node that finds no swap on the
# host makes a zram device (lz4, --zram-mb) and swaps on it; a second node
# joins it instead of making another; a node killed with -9 and restarted
# takes its device back; the last dsec node that stops cleanly swaps it off
# and removes it. A host with a swap of its own keeps it and the node uses it.
#
# These tests change the host's swap: each starts only when the host has no
# swap and no other dsec node holds a zram (the record /run/dsec/zram), and
# leaves the host as it found it.
import os
import re
import signal
import subprocess
import time

import pytest

from dsec_harness import Node, wait_for

RECORD = "/run/dsec/zram"
# zram alone: no swap tier file and zswap left as it is (test_swap_tier.py
# covers those).
ZRAM_ONLY = ["--swap-file-mb", "0", "--zswap-compressor", "off"]
CONTROL = "/sys/class/zram-control"


def active_swaps():
    with open("/proc/swaps") as f:
        return [line.split()[0] for line in f.read().splitlines()[1:] if line.strip()]


def zram_devices():
    return sorted(d for d in os.listdir("/sys/block") if d.startswith("zram"))


@pytest.fixture
def no_swap():
    """The host has no swap and no dsec zram: these tests own the swap state."""
    if not os.path.exists(CONTROL + "/hot_add"):
        pytest.skip(f"this kernel has no zram ({CONTROL} missing)")
    if active_swaps():
        pytest.skip(f"the host has swap {active_swaps()}: a node would use it, not make zram")
    if os.path.exists(RECORD):
        pytest.skip(f"another dsec node on this host holds a zram ({RECORD})")
    before = zram_devices()
    yield before
    # Whatever a failed test left: never leave a swap of ours active.
    for path in active_swaps():
        if path.startswith("/dev/zram") and path[5:] not in before:
            subprocess.run(["swapoff", path])
    for d in zram_devices():
        if d not in before:
            with open(f"/sys/block/{d}/reset", "w") as f:
                f.write("1")
            with open(CONTROL + "/hot_remove", "w") as f:
                f.write(d[4:])
    if os.path.exists(RECORD):
        os.unlink(RECORD)


def zram_line(node):
    """(verb, device) of the node's latest zram log line."""
    m = re.findall(r"zram: (made|joined|took back) (zram\d+)", node.log_tail(400))
    assert m, f"no zram line in the log of {node.node_id}:\n{node.log_tail()}"
    return m[-1]


def stop_and_clean(node):
    node.stop_ok()
    node.remove_state()


def test_node_makes_lz4_zram_when_the_host_has_no_swap_and_removes_it_on_stop(
        dsec_bin, store, no_swap):
    n = Node(dsec_bin, store, extra_args=["--zram-mb", "256", *ZRAM_ONLY]).start()
    try:
        verb, dev = zram_line(n)
        assert verb == "made"
        assert dev not in no_swap, "the node took an existing zram device"
        assert f"/dev/{dev}" in active_swaps()
        with open(f"/sys/block/{dev}/disksize") as f:
            assert int(f.read()) == 256 << 20
        with open(f"/sys/block/{dev}/comp_algorithm") as f:
            assert "[lz4]" in f.read()
        status, health = n.client.healthz()
        assert status == 200
        z = health["zram"]
        assert z["active"] is True and z["device"] == dev, z
        assert z["disksize_bytes"] == 256 << 20, z
        for k in ("stored_bytes", "compressed_bytes", "memory_bytes"):
            assert isinstance(z[k], int) and z[k] >= 0, z
        status, text = n.client.call("GET", "/metrics")
        assert status == 200
        text = text.decode() if isinstance(text, bytes) else text
        assert re.search(r'dsec_zram_disksize_bytes\{node="%s",device="%s"\} %d'
                         % (n.node_id, dev, 256 << 20), text), text
        for name in ("dsec_zram_stored_bytes", "dsec_zram_compressed_bytes",
                     "dsec_zram_memory_bytes"):
            assert name + "{" in text, name
    finally:
        stop_and_clean(n)
    assert f"/dev/{dev}" not in active_swaps()
    assert dev not in zram_devices(), f"{dev} was not removed"
    assert not os.path.exists(RECORD)


def test_a_second_node_joins_the_zram_and_the_last_one_out_removes_it(dsec_bin, store, no_swap):
    a = Node(dsec_bin, store, extra_args=["--zram-mb", "128", *ZRAM_ONLY]).start()
    b = None
    try:
        _, dev = zram_line(a)
        b = Node(dsec_bin, store, extra_args=["--zram-mb", "128", *ZRAM_ONLY]).start()
        verb, dev_b = zram_line(b)
        assert (verb, dev_b) == ("joined", dev)
        assert len(zram_devices()) == len(no_swap) + 1, "a second device was made"
        stop_and_clean(a)
        assert f"/dev/{dev}" in active_swaps(), "the first node took the swap from the second"
    finally:
        if a.alive():
            stop_and_clean(a)
        if b is not None:
            stop_and_clean(b)
    assert f"/dev/{dev}" not in active_swaps()
    assert dev not in zram_devices()


def test_a_node_killed_with_minus_9_takes_its_zram_back(dsec_bin, store, no_swap):
    n = Node(dsec_bin, store, extra_args=["--zram-mb", "128", *ZRAM_ONLY]).start()
    try:
        _, dev = zram_line(n)
        n.proc.send_signal(signal.SIGKILL)
        n.proc.wait()
        assert f"/dev/{dev}" in active_swaps()  # nothing ran at the kill
        n.start()  # same node id and state dir
        verb, again = zram_line(n)
        assert (verb, again) == ("took back", dev)
        assert zram_devices() == sorted(no_swap + [dev]), "a second device was made"
    finally:
        stop_and_clean(n)
    assert f"/dev/{dev}" not in active_swaps()
    assert dev not in zram_devices()
    assert not os.path.exists(RECORD)


def test_zram_mb_0_runs_without_swap(dsec_bin, store, no_swap):
    n = Node(dsec_bin, store, extra_args=["--zram-mb", "0", *ZRAM_ONLY]).start()
    try:
        assert "zram: off (--zram-mb 0)" in n.log_tail()
        z = n.client.healthz()[1]["zram"]
        assert z["active"] is False and z["note"] == "zram: off (--zram-mb 0)", z
        assert active_swaps() == []
        assert zram_devices() == no_swap
    finally:
        stop_and_clean(n)


def test_a_host_swap_is_used_and_left_alone(dsec_bin, store, no_swap):
    # A swap the node did not make: a zram device this test makes by hand.
    with open(CONTROL + "/hot_add") as f:
        idx = int(f.read())
    dev = f"/dev/zram{idx}"
    try:
        with open(f"/sys/block/zram{idx}/disksize", "w") as f:
            f.write(str(64 << 20))
        subprocess.run(["mkswap", dev], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["swapon", dev], check=True)
        n = Node(dsec_bin, store, extra_args=["--zram-mb", "128", *ZRAM_ONLY]).start()
        try:
            assert f"zram: off (the host has swap {dev}, using it)" in n.log_tail()
            assert zram_devices() == sorted(no_swap + [f"zram{idx}"])
        finally:
            stop_and_clean(n)
        assert dev in active_swaps(), "the node swapped off a swap it did not make"
    finally:
        subprocess.run(["swapoff", dev])
        with open(f"/sys/block/zram{idx}/reset", "w") as f:
            f.write("1")
        with open(CONTROL + "/hot_remove", "w") as f:
            f.write(str(idx))


def test_zram_mb_must_be_a_whole_number(dsec_bin, tmp_path):
    p = subprocess.run([dsec_bin, "node", "--state-dir", str(tmp_path), "--zram-mb", "-3"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == 2
    assert b"--zram-mb" in p.stderr


def test_nodes_starting_at_once_share_one_device(dsec_bin, store, no_swap):
    import threading
    nodes = [Node(dsec_bin, store, extra_args=["--zram-mb", "128", *ZRAM_ONLY]) for _ in range(3)]
    threads = [threading.Thread(target=n.start) for n in nodes]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        lines = [zram_line(n) for n in nodes]
        assert sorted(v for v, _ in lines) == ["joined", "joined", "made"], lines
        assert len({d for _, d in lines}) == 1, lines
        assert len(zram_devices()) == len(no_swap) + 1
        dev = lines[0][1]
    finally:
        for n in nodes:
            if n.alive():
                stop_and_clean(n)
    assert f"/dev/{dev}" not in active_swaps()
    assert dev not in zram_devices()
