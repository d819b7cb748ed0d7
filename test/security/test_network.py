# Network allow-lists and denial counts end to end: a "fake internet" peer
# (its own network namespace behind a host veth, with TCP and UDP echo
# servers) and python sandboxes that probe it. Mode none reaches nothing;
# an allow-list reaches exactly its entries (TCP connect, UDP sendto, IPv6
# sockets to v4-mapped addresses alike); the host itself and the node's
# ports stay out of reach whatever the list says; PUT .../network applies to
# the next connect; refused connects, syscalls and file writes show up in
# GET /v1/sandboxes/{id} "denials"; destroy and node stop leave no veth,
# bridge or nftables table behind.
#
# Domain entries are tested by test/security/net_policy_test.cpp, which
# can give the node a private /etc/hosts.
import json
import os
import random
import subprocess
import textwrap
import time
import urllib.parse

import pytest

from dsec_harness import Node, _finish_node, start_node

PYTHON = "base/python@3.11"
BUSYBOX_LAYER = "base/busybox@1"

ECHO = textwrap.dedent("""
    import socket, threading
    def tcp(port):
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port)); s.listen(16)
        while True:
            c, _ = s.accept(); c.settimeout(2)
            try: c.sendall(b"echo:" + c.recv(100))
            except Exception: pass
            c.close()
    def udp(port):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", port))
        while True:
            d, a = s.recvfrom(100); s.sendto(b"echo:" + d, a)
    for p in (8080, 8081): threading.Thread(target=tcp, args=(p,), daemon=True).start()
    for p in (9090, 9091): threading.Thread(target=udp, args=(p,), daemon=True).start()
    threading.Event().wait()
""")

# Runs a list of probes inside the sandbox; prints one result per probe:
# "ok:<reply>" or the errno name.
PROBE = textwrap.dedent("""
    import errno, json, socket, sys
    def name(e): return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
    out = []
    for kind, host, port in json.loads(sys.argv[1]):
        try:
            if kind == "tcp" or kind == "tcp6":
                s = socket.socket(socket.AF_INET6 if kind == "tcp6" else socket.AF_INET)
                s.settimeout(3); s.connect((host, port)); s.sendall(b"hi")
                out.append("ok:" + s.recv(100).decode())
            elif kind == "udp" or kind == "udp6":
                s = socket.socket(socket.AF_INET6 if kind == "udp6" else socket.AF_INET,
                                  socket.SOCK_DGRAM)
                s.settimeout(3); s.sendto(b"hi", (host, port))
                out.append("ok:" + s.recvfrom(100)[0].decode())
            elif kind == "raw":
                socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
                out.append("ok:raw")
        except OSError as e:
            out.append(name(e))
    print(json.dumps(out))
""")


# The sandbox's default gateway (the node bridge), hex little-endian.
ROUTE = ("print([l.split()[2] for l in open('/proc/net/route').read().splitlines()[1:]"
         " if l.split()[1] == '00000000'][0])")


def sh(cmd):
    return subprocess.run(cmd, shell=True, check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT).stdout.decode()


def node_tag(node_id):
    """The 6 hex digits a node names its bridge, veths and nft table after
    (FNV-1a of the node id, as in backends/net/net_link.cpp)."""
    h = 2166136261
    for c in node_id.encode():
        h = ((h ^ c) * 16777619) & 0xffffffff
    return f"{h & 0xffffff:06x}"


def links_of(tag):
    return sorted(l.split(":")[1].strip().split("@")[0]
                  for l in sh("ip -o link show").splitlines()
                  if f"ds{tag}" in l.split(":")[1])


class Peer:
    def __init__(self):
        self.k = random.randint(20, 250)
        self.ns = f"h4-peer-{os.getpid()}-{self.k}"
        self.host_if = f"h4pe{os.getpid() % 100000}"
        self.host_addr = f"10.123.{self.k}.1"
        self.addr = f"10.123.{self.k}.2"
        sh(f"ip netns add {self.ns}")
        sh(f"ip link add {self.host_if} type veth peer name eth0 netns {self.ns}")
        sh(f"ip addr add {self.host_addr}/24 dev {self.host_if} && ip link set {self.host_if} up")
        sh(f"ip netns exec {self.ns} sh -c 'ip addr add {self.addr}/24 dev eth0 && "
           f"ip link set eth0 up && ip link set lo up && ip route add default via {self.host_addr}'")
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, "/usr/bin/python3", "-c", ECHO])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out = sh(f"ip netns exec {self.ns} ss -ltnu")
            if all(f":{p} " in out for p in (8080, 8081, 9090, 9091)):
                return
            time.sleep(0.05)
        raise AssertionError("peer echo servers did not start")

    def close(self):
        self.proc.kill()
        self.proc.wait()
        subprocess.run(["ip", "link", "del", self.host_if], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", self.ns], stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def peer():
    p = Peer()
    yield p
    p.close()


def quote(sid):
    return urllib.parse.quote(sid, safe="")


def probe(client, sid, probes):
    client.put_file(sid, "/tmp/probe.py", PROBE.encode())
    r = client.sh(sid, ["python3", "/tmp/probe.py", json.dumps(probes)], timeout_s=60)
    assert r["exit_code"] == 0, r
    return json.loads(r["stdout"])


def denials(client, sid):
    status, info = client.get(sid)
    assert status == 200, info
    return info["denials"]


def set_network(client, sid, allow):
    return client.call("PUT", f"/v1/sandboxes/{quote(sid)}/network", {"allow": allow})


def test_mode_none_reaches_nothing(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256)
    got = probe(client, sid, [["tcp", peer.addr, 8080], ["udp", peer.addr, 9090]])
    assert got == ["EPERM", "EPERM"], got
    d = denials(client, sid)
    assert d["network"] == 2, d
    assert f"net {peer.addr}:8080" in d["recent"], d


def test_allow_list_reaches_exactly_its_entries(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256,
                           network={"allow": [f"{peer.addr}:8080", f"{peer.addr}:9090"]})
    got = probe(client, sid, [
        ["tcp", peer.addr, 8080],
        ["tcp", peer.addr, 8081],
        ["udp", peer.addr, 9090],
        ["udp", peer.addr, 9091],
        ["tcp6", "::ffff:" + peer.addr, 8081],
        ["udp6", "::ffff:" + peer.addr, 9091],
        ["tcp6", "::ffff:" + peer.addr, 8080],
        ["raw", "", 0],
    ])
    assert got == ["ok:echo:hi", "EPERM", "ok:echo:hi", "EPERM", "EPERM", "EPERM",
                   "ok:echo:hi", "EPERM"], got
    d = denials(client, sid)
    assert d["network"] == 4, d
    for want in (f"net {peer.addr}:8081", f"net {peer.addr}:9091"):
        assert want in d["recent"], d


def test_host_and_node_ports_are_never_reachable(client, node, peer):
    host_addrs = [l.split()[3].split("/")[0] for l in sh("ip -o -4 addr show").splitlines()
                  if not l.split()[1].startswith("lo")]
    # A listener on every host address stands in for anything the host serves.
    with __import__("socket").socket() as srv:
        srv.setsockopt(1, 2, 1)
        srv.bind(("0.0.0.0", 0))
        srv.listen(8)
        port = srv.getsockname()[1]
        allow = [f"{a}:*" for a in host_addrs] + ["0.0.0.0/0:*"]
        sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": allow})
        gw = client.sh(sid, ["python3", "-c", ROUTE])["stdout"]
        gw = ".".join(str(b) for b in reversed(bytes.fromhex(gw.strip())))
        targets = [gw] + host_addrs
        got = probe(client, sid, [["tcp", a, p] for a in targets
                                  for p in (port, node.rest_port, node.listen_port)]
                    + [["udp", a, node.listen_port] for a in targets])
        assert set(got) == {"EPERM"}, (targets, got)
        # The wide entry itself works for the peer.
        assert probe(client, sid, [["tcp", peer.addr, 8081]]) == ["ok:echo:hi"]


def test_policy_update_applies_to_the_next_connect(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256,
                           network={"allow": [f"{peer.addr}:8080"]})
    assert probe(client, sid, [["tcp", peer.addr, 8080], ["tcp", peer.addr, 8081]]) == \
        ["ok:echo:hi", "EPERM"]
    status, out = set_network(client, sid, [f"{peer.addr}:8081"])
    assert status == 200, out
    assert probe(client, sid, [["tcp", peer.addr, 8080], ["tcp", peer.addr, 8081]]) == \
        ["EPERM", "ok:echo:hi"]
    status, out = set_network(client, sid, [])
    assert status == 200, out
    assert probe(client, sid, [["tcp", peer.addr, 8081]]) == ["EPERM"]
    status, out = set_network(client, sid, ["10.1.2.3/8:80"])
    assert status == 400, out
    assert "10.1.2.3/8:80" in json.dumps(out), out


def test_bad_entries_are_refused_naming_them(client):
    for bad in ["10.0.0.1/8:80", "1.2.3.4", "1.2.3.4:0", "[1.2.3.4]:80", "bad_name!:80"]:
        status, out = client.create([PYTHON], network={"allow": [bad]})
        assert status == 400, (bad, out)
        assert bad in json.dumps(out), (bad, out)


def test_syscall_and_file_denials_are_counted(client):
    sid = client.create_ok([PYTHON], memory_mb=256, protect={"readonly": ["/etc"]})
    script = textwrap.dedent("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
        libc.unshare(0x10000000)
        try: open("/etc/hostname-new", "w")
        except OSError: pass
        open("/etc/passwd").read()  # a read is not a denial
    """)
    client.put_file(sid, "/tmp/d.py", script.encode())
    assert client.sh(sid, ["python3", "/tmp/d.py"], timeout_s=60)["exit_code"] == 0
    d = denials(client, sid)
    assert d["syscall"] == 2, d
    assert d["file"] == 1, d
    assert "syscall mount" in d["recent"] and "syscall unshare" in d["recent"], d
    assert "file /etc/hostname-new" in d["recent"], d
    # /metrics carries the same counts, per sandbox and kind.
    status, text = client.call("GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else text
    assert f'sandbox="{sid}",kind="syscall"}} 2' in text, text[-2000:]
    assert f'sandbox="{sid}",kind="file"}} 1' in text, text[-2000:]


def test_destroy_and_stop_leave_nothing(dsec_bin, store, peer):
    n = Node(dsec_bin, store).start()
    try:
        tag = node_tag(n.node_id)
        c = n.client
        sid = c.create_ok([PYTHON], memory_mb=256, network={"allow": [f"{peer.addr}:8080"]})
        assert probe(c, sid, [["tcp", peer.addr, 8080]]) == ["ok:echo:hi"]
        assert len(links_of(tag)) == 2, links_of(tag)  # bridge + veth
        assert f"dsec_{tag}" in sh("nft list tables")
        status, out = c.delete(sid)
        assert status in (200, 204), out
        assert links_of(tag) == [f"ds{tag}br"]
    finally:
        _finish_node(n)
    assert links_of(tag) == []
    assert f"dsec_{tag}" not in sh("nft list tables")


def test_without_ebpf_allow_lists_are_refused_and_mode_none_works(dsec_bin, store):
    # DSEC_EBPF=off: what a node without CAP_BPF or BTF sees.
    n = start_node(dsec_bin, store, DSEC_EBPF="off")
    try:
        status, out = n.client.create([BUSYBOX_LAYER], network={"allow": ["10.1.2.3:80"]})
        assert status == 400, out
        assert "eBPF" in json.dumps(out) and "DSEC_EBPF=off" in json.dumps(out), out
        sid = n.client.create_ok([BUSYBOX_LAYER])
        r = n.client.sh(sid, "ls /sys/class/net")
        assert r["stdout"] == "lo\n", r
    finally:
        _finish_node(n)
