# Pause frees memory and keeps state (DESIGN.md §6), on a node with its zram
# swap alone and on one with the swap tier (sys/swap_tier.hpp: a disk file,
# zswap in front): a paused container holding 200 MiB (64 MiB random, 136 MiB
# compressible text; half of that in its heap, half in a /dev/shm file) leaves
# RAM, and after resume its process, heap and files are as they were. With the
# tier at least 70% of it goes back to the host net of what the swap keeps in
# RAM (zram stores the random part at full size in RAM: ~63%, so the zram node
# is held to 70% of the charge only). A sandbox's memory_mb caps RAM plus swap
# (memsw) on both, so one sandbox cannot fill the node's swap.
import hashlib
import os
import time
import urllib.parse

import pytest

from dsec_harness import Node, PYTHON, _finish_node, wait_for

MIB = 1 << 20
HOLDER = 200 * MIB

HOLDER_PY = r'''
import hashlib, os, time
rnd = os.urandom(64 << 20)
blk = b"".join(b"line %08d of compressible text, mostly the same words again\n" % i
               for i in range(2000))
n = (68 << 20) // len(blk)
heap = [blk + b"%d" % i for i in range(n)]
with open("/dev/shm/holder", "wb") as f:
    for i in range(n):
        f.write(blk)
def digest():
    h = hashlib.sha256(rnd)
    for b in heap:
        h.update(b)
    return h.hexdigest()
with open("/tmp/holder.ready.tmp", "w") as f:
    f.write(digest())
os.rename("/tmp/holder.ready.tmp", "/tmp/holder.ready")
while True:
    time.sleep(0.2)
    if os.path.exists("/tmp/holder.check"):
        with open("/tmp/holder.after.tmp", "w") as f:
            f.write(digest())
        os.rename("/tmp/holder.after.tmp", "/tmp/holder.after")
        os.unlink("/tmp/holder.check")
'''


SWAP_DIR = os.path.join(os.environ.get("DSEC_E2E_TMP", "/var/tmp"), "dsec-pause-swap")
KINDS = {
    # zram alone: no file, zswap left as it is.
    "zram": ["--zram-mb", "1024", "--swap-file-mb", "0", "--zswap-compressor", "off"],
    # The tier: a 1 GiB file with zswap (lzo) in front, no zram.
    "tier": ["--zram-mb", "0", "--swap-file-mb", "1024", "--swap-dir", SWAP_DIR],
}


def host_swaps():
    """Swaps that are not dsec's (its zram or tier): the host's own."""
    ours = set()
    for rec, key in (("/run/dsec/zram", "device"), ("/run/dsec/swaptier", "file")):
        try:
            for line in open(rec):
                if line.startswith(key + " "):
                    v = line.split()[1]
                    ours.add(v if v.startswith("/") else "/dev/" + v)
        except OSError:
            pass
    return [s for s in open("/proc/swaps").read().split("\n")[1:] if s.strip()
            and s.split()[0] not in ours]


@pytest.fixture(scope="module", params=sorted(KINDS))
def znode(request, dsec_bin, store):
    """A node with its zram swap, or with the swap tier."""
    if request.param == "tier" and (host_swaps() or os.path.exists("/run/dsec/swaptier")):
        pytest.skip("the host has a swap of its own or another node's tier: this node "
                    "would not make its own")
    n = Node(dsec_bin, store, extra_args=KINDS[request.param]).start()
    n.kind = request.param
    yield n
    _finish_node(n)


@pytest.fixture
def zc(znode):
    if not open("/proc/swaps").read().strip().count("\n"):
        pytest.skip("no swap on this host and the node could not make zram: "
                    + znode.log_tail(50))
    c = znode.client
    mark = len(c.created)
    yield c
    for sid in reversed(c.created[mark:]):
        c.delete(sid)
    del c.created[mark:]


def cg(node, sid, knob):
    with open(f"/sys/fs/cgroup/memory/dsec/{node.node_id}/{sid}/{knob}") as f:
        return int(f.read().split()[0])


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def zswap_pool():
    """RAM zswap's pool takes now (meminfo Zswap), bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Zswap:"):
                return int(line.split()[1]) * 1024
    return 0


def zram_used():
    """RAM the zram swaps take now (mm_stat mem_used_total), bytes."""
    total = 0
    for line in open("/proc/swaps").read().splitlines()[1:]:
        dev = line.split()[0]
        if dev.startswith("/dev/zram"):
            with open(f"/sys/block/{dev[5:]}/mm_stat") as f:
                total += int(f.read().split()[2])
    return total


def q(sid):
    return urllib.parse.quote(sid, safe="")


def test_pause_frees_most_of_a_200_mib_holder_and_resume_keeps_its_state(zc, znode):
    sid = zc.create_ok([PYTHON], memory_mb=512)
    assert zc.put_file(sid, "/tmp/holder.py", HOLDER_PY.encode())[0] in (200, 201, 204)
    assert zc.put_file(sid, "/tmp/note.txt", b"kept across pause\n")[0] in (200, 201, 204)
    status, out = zc.call("POST", f"/v1/sandboxes/{q(sid)}/exec?background=1",
                          {"cmd": "python3 /tmp/holder.py"})
    assert status == 201, out
    wait_for(lambda: zc.get_file(sid, "/tmp/holder.ready")[0] == 200, 120,
             what="the holder to fill its memory")
    ready = zc.get_file(sid, "/tmp/holder.ready")[1]
    shm_before = zc.sh(sid, "python3 -c \"import hashlib;print(hashlib.sha256("
                            "open('/dev/shm/holder','rb').read()).hexdigest())\"")["stdout"]
    before = cg(znode, sid, "memory.usage_in_bytes")
    assert before >= HOLDER * 0.9, f"the holder holds only {before / MIB:.0f} MiB"
    avail0, zram0, pool0 = mem_available(), zram_used(), zswap_pool()
    t0 = time.monotonic()
    status, info = zc.call("POST", f"/v1/sandboxes/{q(sid)}/pause")
    took = time.monotonic() - t0
    assert status == 200 and info["state"] == "paused", info
    after = cg(znode, sid, "memory.usage_in_bytes")
    freed = before - after
    zram_took = zram_used() - zram0 + zswap_pool() - pool0  # what swap keeps in RAM
    print(f"pause ({znode.kind}): {before / MIB:.0f} -> {after / MIB:.0f} MiB charged in "
          f"{took:.2f} s; swap kept {zram_took / MIB:.0f} MiB of it in RAM (host net "
          f"{(freed - zram_took) / MIB:.0f} "
          f"MiB); host MemAvailable {(mem_available() - avail0) / MIB:+.0f} MiB (noisy: "
          f"a shared host); RAM+swap {cg(znode, sid, 'memory.memsw.usage_in_bytes') / MIB:.0f} MiB")
    assert freed >= 0.7 * HOLDER, (f"pause freed {freed / MIB:.0f} MiB of a "
                                   f"{HOLDER / MIB:.0f} MiB holder ({after / MIB:.0f} MiB left)")
    if znode.kind == "tier":
        assert freed - zram_took >= 0.7 * HOLDER, (
            f"pause gave the host {(freed - zram_took) / MIB:.0f} MiB of a {HOLDER / MIB:.0f} "
            f"MiB holder (swap kept {zram_took / MIB:.0f} MiB in RAM)")

    status, info = zc.call("POST", f"/v1/sandboxes/{q(sid)}/resume")
    assert status == 200 and info["state"] == "running", info
    assert zc.get_file(sid, "/tmp/note.txt") == (200, b"kept across pause\n")
    assert zc.put_file(sid, "/tmp/holder.check", b"")[0] in (200, 201, 204)
    wait_for(lambda: zc.get_file(sid, "/tmp/holder.after")[0] == 200, 60,
             what="the resumed holder to hash its heap")
    assert zc.get_file(sid, "/tmp/holder.after")[1] == ready, "the heap changed across pause"
    shm_after = zc.sh(sid, "python3 -c \"import hashlib;print(hashlib.sha256("
                           "open('/dev/shm/holder','rb').read()).hexdigest())\"")["stdout"]
    assert shm_after == shm_before, "the /dev/shm file changed across pause"


def test_memsw_limit_equals_the_memory_limit(zc, znode):
    sid = zc.create_ok(memory_mb=256)
    assert cg(znode, sid, "memory.limit_in_bytes") == 256 * MIB
    assert cg(znode, sid, "memory.memsw.limit_in_bytes") == 256 * MIB


def test_a_sandbox_cannot_use_more_than_memory_mb_of_ram_plus_swap(zc, znode):
    sid = zc.create_ok([PYTHON], memory_mb=64)
    # 200 MiB of random bytes: with swap and no RAM+swap cap this would fit
    # (64 MiB in RAM, the rest in zram); with the cap the sandbox is OOM-killed.
    status, r = zc.exec(sid, "python3 -c \"import os; b = os.urandom(200 << 20); print('fit')\"",
                        timeout_s=120)
    assert status == 503 or (status == 200 and r["exit_code"] != 0 and "fit" not in r["stdout"]), \
        (status, r)
    if status == 503:
        sb = wait_for(lambda: (lambda s: s[1] if s[1].get("state") == "failed" else None)(
            zc.get(sid)), 30, what="the sandbox to be reported failed")
        assert sb["reason"] == "oom", sb


def test_a_sandbox_within_memory_mb_may_use_swap(zc, znode):
    # 48 MiB of heap in a 64 MiB sandbox whose RAM is squeezed by a pause:
    # it still runs after resume (swap holds the rest).
    sid = zc.create_ok([PYTHON], memory_mb=64)
    status, out = zc.call("POST", f"/v1/sandboxes/{q(sid)}/exec?background=1",
                          {"cmd": "python3 -c \"import os,time; b=os.urandom(48<<20); "
                                  "open('/tmp/up','w').write('1'); time.sleep(3600)\""})
    assert status == 201, out
    wait_for(lambda: zc.get_file(sid, "/tmp/up")[0] == 200, 60, what="the allocation")
    assert zc.call("POST", f"/v1/sandboxes/{q(sid)}/pause")[0] == 200
    assert cg(znode, sid, "memory.usage_in_bytes") < 32 * MIB
    assert zc.call("POST", f"/v1/sandboxes/{q(sid)}/resume")[0] == 200
    assert zc.sh(sid, "echo alive")["stdout"] == "alive\n"
