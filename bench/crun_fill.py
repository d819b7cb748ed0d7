"""crun as the peer in bench/create_profile.py: the same fill (busybox
`sleep` containers, 16 in flight, the rate of each batch), by `crun run -d`,
so a rate that falls with N on this host can be told apart from one of
dsec's own making. Each container gets what a dsec sandbox gets by default
and what makes the kernel's costs grow with N: its own namespaces (network
included) and cgroups with a 32 MiB memory limit and a CPU quota of one
CPU (the quota write walks every cpu group on the host, as dsec's does).

crun refuses this host's hybrid cgroup layout, so every crun command runs in
a private mount namespace (made once) in which an empty file hides
/sys/fs/cgroup/unified/cgroup.controllers, as `dsec bench burst`'s crun peer
does; the `nsenter` that enters it is the same cost at every N. The bench
process is the containers' subreaper, as a container manager is, so they do
not become children of the host's PID 1. Everything made (containers, their
cgroups, the namespace, the directory) is removed by close().
"""

import concurrent.futures as cf
import ctypes
import itertools
import json
import os
import shutil
import subprocess
import tempfile

CONTROLLERS = "/sys/fs/cgroup/unified/cgroup.controllers"
PR_SET_CHILD_SUBREAPER = 36


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}: exit {r.returncode}: "
                           f"{(r.stderr or r.stdout).strip()[:300]}")
    return r.stdout


class CrunFill:
    def __init__(self, memory_mb=32, cpu=1.0):
        self.crun = shutil.which("crun")
        if not self.crun:
            raise SystemExit("--peers crun: crun is not installed (apt-get install crun)")
        busybox = shutil.which("busybox")
        if not busybox:
            raise SystemExit("--peers crun: needs a static busybox (apt-get install busybox-static)")
        self.dir = tempfile.mkdtemp(prefix="dsec-crun-fill-", dir="/var/tmp")
        self.seq = itertools.count()
        self.prefix = f"dsecfill{os.getpid()}-"
        self.ns = os.path.join(self.dir, "ns", "mnt")
        self.state = os.path.join(self.dir, "state")
        self.bundle = os.path.join(self.dir, "bundle")
        try:
            self._make_rootfs(busybox)
            self._make_bundle(memory_mb, cpu)
            self._make_namespace()
        except BaseException:
            self.close()
            raise
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def _make_rootfs(self, busybox):
        bin_dir = os.path.join(self.bundle, "rootfs", "bin")
        os.makedirs(bin_dir)
        shutil.copy2(busybox, os.path.join(bin_dir, "busybox"))
        for tool in ("sleep", "sh", "true"):
            os.symlink("busybox", os.path.join(bin_dir, tool))

    def _make_bundle(self, memory_mb, cpu):
        run([self.crun, "spec", "--bundle", self.bundle])
        path = os.path.join(self.bundle, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        cfg["root"] = {"path": "rootfs", "readonly": False}
        cfg["process"]["terminal"] = False
        cfg["process"]["args"] = ["/bin/sleep", "1000000"]
        cfg["linux"]["resources"] = {"memory": {"limit": memory_mb << 20}}
        if cpu:  # 0: no CPU limit, as create_profile's --cpu 0
            cfg["linux"]["resources"]["cpu"] = {"quota": int(cpu * 100000), "period": 100000}
        with open(path, "w") as f:
            json.dump(cfg, f, indent=1)

    def _make_namespace(self):
        ns_dir = os.path.dirname(self.ns)
        os.makedirs(ns_dir)
        # A namespace file must sit on a private mount.
        run(["mount", "--bind", ns_dir, ns_dir])
        run(["mount", "--make-private", ns_dir])
        open(self.ns, "w").close()
        empty = os.path.join(self.dir, "empty")
        open(empty, "w").close()
        run(["unshare", f"--mount={self.ns}", "--propagation", "private",
             "mount", "--bind", empty, CONTROLLERS])

    def _crun(self, *args):
        return run(["nsenter", f"--mount={self.ns}", self.crun, "--root", self.state, *args],
                   timeout=300)

    def create(self, _):
        cid = f"{self.prefix}{next(self.seq)}"
        # The container inherits crun's stdout and stderr: files, not pipes,
        # or reading them to the end would wait for the container.
        with tempfile.TemporaryFile() as err:
            r = subprocess.run(["nsenter", f"--mount={self.ns}", self.crun, "--root", self.state,
                                "run", "-d", "--bundle", self.bundle, cid],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                               timeout=300)
            if r.returncode != 0:
                err.seek(0)
                raise RuntimeError(f"crun run -d {cid}: exit {r.returncode}: "
                                   f"{err.read().decode(errors='replace').strip()[:300]}")
        return cid

    def reap(self):
        """Reaps the containers that ended (their subreaper is this process)."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def close(self):
        if os.path.exists(self.state) and os.path.exists(self.ns):
            try:
                listed = self._crun("list", "-q").split()
            except RuntimeError:
                listed = []
            mine = [c for c in listed if c.startswith(self.prefix)]
            with cf.ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda c: self._crun("delete", "-f", c), mine))
            self.reap()
        ns_dir = os.path.dirname(self.ns)
        for target in (self.ns, ns_dir):
            subprocess.run(["umount", target], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)

