# A cluster of real `dsec node` processes, each in its own network namespace
# on one Linux bridge with an address of its own, and the faults a nemesis
# injects into it (issue 28). Clients (REST, the Python SDK) run in the host
# namespace and reach every node over the bridge, also during a partition:
# partitions and loss are nftables rules INSIDE the nodes' namespaces that
# match only the other nodes' addresses, never the host's.
#
# What it makes, it removes (close(), also after a failure or a signal):
# nodes (by their own pids), namespaces, veths, the bridge, nftables tables
# (they live in the namespaces), loop-mounted state volumes, temp dirs.
#
# Faults:
#   partition(groups)           nodes in different groups cannot talk
#   one_way(src, dst)           dst hears nothing from src (src hears dst)
#   loss(node, percent)         nftables `numgen random` drops on node's input
#                               from other nodes (the kernel has no sch_netem)
#   delay                       NOT available: without sch_netem the kernel
#                               cannot hold packets for a time (tbf and htb only
#                               shape rate); refused by name
#   kill9 / restart             SIGKILL of the node's process group, start
#                               again on the same state dir
#   stop / cont                 SIGSTOP / SIGCONT of the node process
#   fill_disk / free_disk       fill / free the node's loop-mounted state volume
#   stop_all / start_all        whole-cluster stop (kill -9 of every node) and
#                               start again: every sandbox must be adopted
#   heal()                      removes every rule, resumes stopped nodes
#
# Standard library only, plus the shared Client (test/pylib/dsec_harness.py).
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pylib"))

from dsec_harness import Client  # noqa: E402

REST_PORT = 8080
LISTEN_PORT = 7000
HEALTH_WAIT_S = 30


class Refused(RuntimeError):
    """The machine or the caller cannot have what was asked (named in the text)."""


def run(*argv, check=True, input=None):
    p = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def require_capabilities():
    """Raises Refused, saying what is missing, unless this process can make
    network namespaces, a bridge and nftables rules (root, netns, nft)."""
    if os.geteuid() != 0:
        raise Refused(f"the fault harness needs root (euid is {os.geteuid()}): it makes "
                      "network namespaces, a bridge, nftables rules and loop mounts")
    for tool in ("ip", "nft", "nsenter", "losetup", "mkfs.ext4"):
        if not shutil.which(tool):
            raise Refused(f"the fault harness needs `{tool}` on PATH")
    probe = f"dsfprobe{os.getpid()}"
    p = run("ip", "netns", "add", probe, check=False)
    if p.returncode != 0:
        raise Refused(f"the fault harness needs network namespaces: ip netns add: "
                      f"{p.stderr.strip()}")
    try:
        p = run("ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe",
                check=False)
        if p.returncode != 0:
            raise Refused(f"the fault harness needs nftables in a namespace: {p.stderr.strip()}")
    finally:
        run("ip", "netns", "del", probe, check=False)


class ClusterNode:
    """One node: its namespace, address, state volume and process."""

    def __init__(self, cluster, index):
        self.cluster = cluster
        self.index = index
        self.node_id = f"n{index + 1}"
        self.ns = f"{cluster.tag}n{index + 1}"
        self.addr = f"{cluster.prefix}.{index + 10}"
        self.veth = f"{cluster.tag}h{index + 1}"
        self.state_dir = os.path.join(cluster.root, self.node_id, "state")
        self.volume = os.path.join(cluster.root, self.node_id, "volume.img")
        self.log_path = os.path.join(cluster.root, self.node_id, "node.log")
        self.filler = os.path.join(self.state_dir, "dsf-filler")
        self.proc = None
        self.stopped = False
        self.client = Client(self.addr, REST_PORT, timeout=60)

    @property
    def listen(self):
        return f"{self.addr}:{LISTEN_PORT}"

    def nsenter(self, *argv):
        return ["nsenter", f"--net=/run/netns/{self.ns}", "--", *argv]

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines=80):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def start(self, wait=True):
        args = [self.cluster.dsec_bin, "node", "--state-dir", self.state_dir,
                "--store", self.cluster.store, "--rest", f"{self.addr}:{REST_PORT}",
                "--listen", self.listen, "--node-id", self.node_id, "--insecure",
                "--zram-mb", "0", "--no-trajectory"]
        others = [n.listen for n in self.cluster.nodes if n is not self]
        if others:
            args += ["--join", ",".join(others)]
        log = open(self.log_path, "ab")
        # Its own session: kill9() signals the node's whole process group, as
        # a terminal's Ctrl-\ would, and must reach nothing else.
        self.proc = subprocess.Popen(self.nsenter(*args), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.stopped = False
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self):
        deadline = time.monotonic() + HEALTH_WAIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.node_id} exited {self.proc.returncode} at "
                                   f"start:\n{self.log_tail()}")
            try:
                if self.client.healthz(timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"node {self.node_id} did not answer /healthz within "
                           f"{HEALTH_WAIT_S}s:\n{self.log_tail()}")

    def kill9(self):
        """SIGKILL of the node's process group (only the node must die)."""
        if self.alive():
            if self.stopped:
                os.kill(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.stopped = False

    def stop(self, timeout=90):
        """SIGTERM and wait: the node stops every sandbox. Returns the exit code."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        if self.stopped:
            self.cont()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def sigstop(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.stopped = True

    def cont(self):
        if self.alive() and self.stopped:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.stopped = False

    def nft(self, script):
        run("ip", "netns", "exec", self.ns, "nft", "-f", "-", input=script)

    def fill_disk(self):
        """Fills the state volume: a file takes every free block."""
        st = os.statvfs(self.state_dir)
        free = st.f_bavail * st.f_frsize
        with open(self.filler, "wb") as f:
            try:
                os.posix_fallocate(f.fileno(), 0, max(free, 4096))
            except OSError:
                pass
        # What fallocate could not take (reserved rounding), writes do.
        try:
            with open(self.filler, "ab") as f:
                while True:
                    f.write(b"\0" * (1 << 20))
        except OSError:
            pass

    def free_disk(self):
        try:
            os.unlink(self.filler)
        except FileNotFoundError:
            pass


class NetnsCluster:
    """N nodes in namespaces on one bridge. Use as a context manager."""

    def __init__(self, dsec_bin, store, n=5, volume_mb=1024, tmp_root="/var/tmp"):
        require_capabilities()
        self.dsec_bin = dsec_bin
        self.source_store = store
        # Short and unique on the machine: interface names stop at 15
        # characters, and other runs may hold a bridge of their own.
        k = free_tag(os.getpid())
        self.tag = f"dsf{k}"
        self.prefix = f"10.211.{k}"
        self.bridge = f"{self.tag}br"
        self.host_addr = f"{self.prefix}.1"
        self.volume_mb = volume_mb
        self.root = tempfile.mkdtemp(prefix="dsec-faults-", dir=tmp_root)
        self.store = os.path.join(self.root, "store")
        self.nodes = [ClusterNode(self, i) for i in range(n)]
        self.undo = []  # (what, fn), run in reverse by close()
        self.rules = {}  # node id -> nftables body of its filter table

    # -- setup and teardown ------------------------------------------------------

    def __enter__(self):
        try:
            self.setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def setup(self):
        self._private_store()
        run("ip", "link", "add", self.bridge, "type", "bridge")
        self.undo.append(("bridge", lambda: run("ip", "link", "del", self.bridge, check=False)))
        run("ip", "addr", "add", f"{self.host_addr}/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for n in self.nodes:
            self._node_net(n)
            self._node_volume(n)
        for n in self.nodes:
            n.start(wait=False)
            self.undo.append((f"node {n.node_id}", n.kill9))
        for n in self.nodes:
            n.wait_healthy()

    def _private_store(self):
        # Hard links of the test store's blobs: snapshots land here, never in
        # the shared store, and nothing is copied.
        os.makedirs(self.store)
        src = self.source_store
        shutil.copytree(os.path.join(src, "blobs"), os.path.join(self.store, "blobs"),
                        copy_function=os.link)
        for name in ("catalog.json", "aliases.json"):
            if os.path.exists(os.path.join(src, name)):
                shutil.copy2(os.path.join(src, name), os.path.join(self.store, name))
        os.makedirs(os.path.join(self.store, "tmp"), exist_ok=True)

    def _node_net(self, n):
        run("ip", "netns", "add", n.ns)
        self.undo.append((f"netns {n.ns}", lambda: run("ip", "netns", "del", n.ns, check=False)))
        run("ip", "link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.ns)
        self.undo.append((f"veth {n.veth}", lambda: run("ip", "link", "del", n.veth, check=False)))
        run("ip", "link", "set", n.veth, "master", self.bridge)
        run("ip", "link", "set", n.veth, "up")
        ex = ["ip", "netns", "exec", n.ns]
        run(*ex, "ip", "link", "set", "lo", "up")
        run(*ex, "ip", "addr", "add", f"{n.addr}/24", "dev", "eth0")
        run(*ex, "ip", "link", "set", "eth0", "up")
        run(*ex, "ip", "route", "add", "default", "via", self.host_addr)
        self._apply(n)

    def _node_volume(self, n):
        os.makedirs(n.state_dir)
        with open(n.volume, "wb") as f:
            f.truncate(self.volume_mb << 20)
        run("mkfs.ext4", "-q", "-F", "-m", "0", n.volume)
        run("mount", "-o", "loop", n.volume, n.state_dir)

        def unmount():
            # The node's own mounts under the state dir first (its quota volume).
            for m in reversed(mounts_under(n.state_dir)):
                run("umount", "-l", m, check=False)
            run("umount", n.state_dir, check=False)
        self.undo.append((f"volume {n.volume}", unmount))

    def close(self):
        """Removes everything setup made, in reverse; never raises."""
        errors = []
        self.rules.clear()
        for n in self.nodes:
            try:
                n.cont()
                n.free_disk()
                # A node killed and not restarted left its sandboxes running
                # (they outlive it): start it so it adopts them, then SIGTERM
                # stops them all.
                if not n.alive() and n.proc is not None:
                    n.start()
                if n.alive():
                    rc = n.stop(timeout=90)
                    if rc != 0:
                        errors.append(f"node {n.node_id}: SIGTERM exit {rc}")
            except Exception as e:
                errors.append(f"node {n.node_id}: {e}")
        while self.undo:
            what, fn = self.undo.pop()
            try:
                fn()
            except Exception as e:  # keep going: the rest must still go
                errors.append(f"{what}: {e}")
        if not mounts_under(self.root):
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            errors.append(f"{self.root} still has mounts; left in place")
        return errors

    # -- faults ------------------------------------------------------------------

    def _apply(self, n):
        """Rewrites node n's filter table from self.rules."""
        body = self.rules.get(n.node_id, "")
        n.nft(f"table inet dsf {{}}\ndelete table inet dsf\n"
              f"table inet dsf {{\n"
              f" chain input {{ type filter hook input priority 0; policy accept;\n{body}\n }}\n"
              f" chain output {{ type filter hook output priority 0; policy accept;\n"
              f"{self.rules.get(n.node_id + '/out', '')}\n }}\n}}\n")

    def _set(self, n, inp, out=""):
        self.rules[n.node_id] = inp
        self.rules[n.node_id + "/out"] = out
        self._apply(n)

    def partition(self, groups):
        """Nodes in different groups (lists of nodes) cannot reach each other."""
        where = {n.node_id: i for i, g in enumerate(groups) for n in g}
        for n in self.nodes:
            cut = [m.addr for m in self.nodes
                   if m is not n and where.get(m.node_id) != where.get(n.node_id)]
            if cut:
                s = "{ " + ", ".join(cut) + " }"
                self._set(n, f"  ip saddr {s} drop", f"  ip daddr {s} drop")
            else:
                self._set(n, "")

    def bridge_partition(self, middle):
        """Two halves that reach `middle` but not each other."""
        rest = [n for n in self.nodes if n is not middle]
        a, b = rest[: len(rest) // 2], rest[len(rest) // 2:]
        for side, other in ((a, b), (b, a)):
            s = "{ " + ", ".join(m.addr for m in other) + " }"
            for n in side:
                self._set(n, f"  ip saddr {s} drop", f"  ip daddr {s} drop")
        self._set(middle, "")
        return a, b

    def one_way(self, src, dst):
        """dst drops everything from src; src still hears dst."""
        self._set(dst, f"  ip saddr {src.addr} drop")

    def loss(self, n, percent):
        """n drops `percent`% of what the other nodes send it."""
        peers = "{ " + ", ".join(m.addr for m in self.nodes if m is not n) + " }"
        self._set(n, f"  ip saddr {peers} numgen random mod 100 < {int(percent)} drop")

    def delay(self, *_):
        raise Refused("delay is not available: the kernel has no sch_netem "
                      "(CONFIG_NET_SCH_NETEM is not set), and tbf/htb shape rate, not latency")

    def heal(self):
        """Every rule gone, every stopped node resumed, disks freed."""
        for n in self.nodes:
            n.cont()
            n.free_disk()
            if self.rules.get(n.node_id) or self.rules.get(n.node_id + "/out"):
                self._set(n, "")

    def stop_all(self):
        """DSec's reset: every node killed at once (kill -9 of each group);
        the sandboxes outlive them and start_all() adopts them."""
        for n in self.nodes:
            n.kill9()

    def start_all(self):
        for n in self.nodes:
            n.start(wait=False)
        for n in self.nodes:
            n.wait_healthy()

    # -- views ------------------------------------------------------------------

    def states(self, n):
        status, out = n.client.call("GET", "/v1/nodes", timeout=10)
        if status != 200:
            return {}
        return {m["id"]: m["state"] for m in out["nodes"]}

    def converged(self, among=None):
        """True if every live node in `among` sees exactly those as alive."""
        among = among or [n for n in self.nodes if n.alive()]
        want = {n.node_id for n in among}
        try:
            return all({i for i, s in self.states(n).items() if s == "alive"} == want
                       for n in among)
        except OSError:
            return False

    def summary(self):
        return {"nodes": [{"id": n.node_id, "addr": n.addr, "ns": n.ns} for n in self.nodes],
                "bridge": self.bridge}


def free_tag(seed):
    """A number in [20, 220) whose bridge and namespaces no one holds."""
    taken = run("ip", "-o", "link", check=False).stdout + run("ip", "netns", "list",
                                                               check=False).stdout
    for i in range(200):
        k = (seed + i * 37) % 200 + 20
        if f"dsf{k}" not in taken and f"10.211.{k}." not in run(
                "ip", "-o", "addr", check=False).stdout:
            return k
    raise Refused("no free bridge name dsf20..dsf219: remove stale ones (ip link del dsfNbr)")


def mounts_under(prefix):
    prefix = os.path.realpath(prefix)
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                out.append(point)
    return out


if __name__ == "__main__":  # a manual check: up, print, down
    with NetnsCluster(sys.argv[1], sys.argv[2], n=int(sys.argv[3]) if len(sys.argv) > 3 else 3) as c:
        print(json.dumps(c.summary()))
        time.sleep(5)
        print({n.node_id: c.states(n) for n in c.nodes})
