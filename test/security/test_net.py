# Red team, egress from a default sandbox (network mode none): no raw or
# packet sockets (no CAP_NET_RAW), and neither the node's ports nor the
# host's addresses are reachable. The eBPF allow-list itself is tested in
# test_network.py.
import socket

from .redteam import attack

EPERM, EACCES = 1, 13
UNREACHABLE = (111, 101, 113, 110)  # ECONNREFUSED, ENETUNREACH, EHOSTUNREACH, ETIMEDOUT


def host_addresses():
    addrs = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            addrs.add(info[4][0])
    except OSError:
        pass
    return sorted(addrs | {"127.0.0.1"})


def test_raw_socket(client, py, unharmed):
    got = attack(client, py, r"""
import socket
res = {}
for name, fam, typ, proto in (("raw_icmp", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                              ("raw_tcp", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP),
                              ("raw6", socket.AF_INET6, socket.SOCK_RAW, 58),
                              ("packet", 17, socket.SOCK_RAW, 0x0300),
                              ("packet_dgram", 17, socket.SOCK_DGRAM, 0x0300)):
    res[name] = err_of(lambda: socket.socket(fam, typ, proto).close())
out(res)
""")
    for k, v in got.items():
        assert v in (EPERM, EACCES), f"{k} socket allowed: {v} ({got})"
    unharmed()


def test_node_ports_unreachable(client, py, node, unharmed):
    targets = [(a, p) for a in host_addresses() for p in (node.rest_port, node.listen_port)]
    got = attack(client, py, f"""
import socket
res = {{}}
for addr, port in {targets!r}:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    res[f"tcp {{addr}}:{{port}}"] = err_of(s.connect, (addr, port))
    s.close()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    res[f"udp {{addr}}:{{port}}"] = err_of(u.sendto, b"x", (addr, port))
    u.close()
out(res)
""")
    for k, v in got.items():
        if k.startswith("tcp"):
            assert v in UNREACHABLE or v == EPERM, f"{k} reachable: {v} ({got})"
        elif not k.startswith("udp 127."):  # a loopback datagram stays in the sandbox's own lo
            assert v != 0, f"{k}: datagram sent out of the sandbox ({got})"
    unharmed()
