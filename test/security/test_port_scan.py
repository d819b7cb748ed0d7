# Red team, issue 29 part 4: agents scan ports for reachable mirrors. A
# sandbox with an allow-list sweeps the node's subnet (its gateway's /24) and
# every address of the host on the ports a mirror or the node would use:
# every probe is refused and counted, and the scan is reported as ONE event,
# first in the sandbox's `denials.recent` and in the node metric
# dsec_port_scans_total, however many probes or reads follow. A program that
# retries one blocked address is not a scan. Then the node, a neighbour and
# the host are checked (the `unharmed` fixture).
import json
import re
import subprocess
import textwrap

from .redteam import PYTHON, wait_for

# Probes every (host, port) with TCP connect and one UDP send per host;
# prints a histogram of the outcomes ("ok" or the errno name).
SCAN = textwrap.dedent("""
    import collections, errno, json, socket, sys
    hosts, ports = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    seen = collections.Counter()
    def name(e): return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
    for h in hosts:
        for p in ports:
            s = socket.socket(); s.settimeout(2)
            try:
                s.connect((h, p)); seen["ok"] += 1
            except OSError as e:
                seen[name(e)] += 1
            s.close()
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.sendto(b"x", (h, 9)); seen["ok"] += 1
        except OSError as e:
            seen[name(e)] += 1
        u.close()
    print(json.dumps(seen))
""")

# The sandbox's default gateway (the node's bridge), hex little-endian.
ROUTE = ("print([l.split()[2] for l in open('/proc/net/route').read().splitlines()[1:]"
         " if l.split()[1] == '00000000'][0])")
# What a mirror or the node might serve on.
PORTS = [22, 80, 443, 3128, 5000, 8080]
# An allow-list entry that opens nothing the scan touches (TEST-NET-1).
ALLOW = ["192.0.2.1:80"]


def host_addresses():
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], check=True,
                         stdout=subprocess.PIPE).stdout.decode()
    return [l.split()[3].split("/")[0] for l in out.splitlines() if not l.split()[1].startswith("lo")]


def scans_total(node):
    status, _, body = node.client.raw("GET", "/metrics")
    assert status == 200
    m = re.search(r'^dsec_port_scans_total{node="[^"]*"} (\d+)$', body.decode(), re.M)
    assert m, "/metrics has no dsec_port_scans_total"
    return int(m.group(1))


def denials(client, sid):
    status, info = client.get(sid)
    assert status == 200, info
    return info["denials"]


def scan(client, sid, hosts, ports):
    client.put_file(sid, "/tmp/scan.py", SCAN.encode())
    r = client.sh(sid, ["python3", "/tmp/scan.py", json.dumps(hosts), json.dumps(ports)],
                  timeout_s=600, timeout=700)
    assert r["exit_code"] == 0, r
    return json.loads(r["stdout"])


def test_a_subnet_and_host_scan_is_denied_counted_and_one_event(node, client, unharmed):
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ALLOW})
    before = scans_total(node)
    gw = client.sh(sid, ["python3", "-c", ROUTE])["stdout"].strip()
    gw = ".".join(str(b) for b in reversed(bytes.fromhex(gw)))
    subnet = [gw.rsplit(".", 1)[0] + f".{i}" for i in range(1, 255)]
    hosts = subnet + [a for a in host_addresses() if a not in subnet]
    ports = PORTS + [node.rest_port, node.listen_port]
    seen = scan(client, sid, hosts, ports)
    probes = len(hosts) * (len(ports) + 1)
    assert seen == {"EPERM": probes}, seen  # nothing answered, nothing timed out
    d = denials(client, sid)
    assert d["network"] == probes, d
    events = [r for r in d["recent"] if "port-scan" in r]
    assert len(events) == 1 and d["recent"][0] == events[0], d["recent"]
    assert events[0].startswith(f"net port-scan: {probes} denied attempts"), events
    assert len(d["recent"]) <= 16
    assert scans_total(node) == before + 1
    # More probes and reads: still one event, its totals follow.
    seen = scan(client, sid, [gw], list(range(9000, 9100)))
    assert seen == {"EPERM": 101}, seen
    d = denials(client, sid)
    assert d["network"] == probes + 101, d
    assert [r for r in d["recent"] if "port-scan" in r] == [d["recent"][0]], d["recent"]
    assert d["recent"][0].startswith(f"net port-scan: {probes + 101} denied attempts")
    assert scans_total(node) == before + 1
    unharmed()


def test_retries_to_one_blocked_mirror_are_no_scan(node, client, unharmed):
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ALLOW})
    before = scans_total(node)
    seen = scan(client, sid, ["192.0.2.7"] * 100, [443])
    assert seen == {"EPERM": 200}, seen
    d = denials(client, sid)
    assert d["network"] == 200, d
    assert not any("port-scan" in r for r in d["recent"]), d["recent"]
    assert scans_total(node) == before
    unharmed()


def test_a_scan_is_reported_without_anyone_reading_the_sandbox(node, client, unharmed):
    """Detection runs on the node's own pass over denials (every 5 s): after
    a sweep, the node logs the event and dsec_port_scans_total counts it
    while nobody reads the sandbox; a later read shows the same one event."""
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ALLOW})
    before = scans_total(node)  # read before the sweep: no event yet
    seen = scan(client, sid, ["192.0.2.9"], list(range(7000, 7040)))
    assert seen == {"EPERM": 41}, seen
    marker = f"sandbox {sid}: net port-scan: "
    line = wait_for(lambda: next((l for l in node.log_tail(400).splitlines() if marker in l),
                                 None), 60, what="the node's port-scan log line")
    assert "denied attempts to" in line, line
    assert scans_total(node) == before + 1
    d = denials(client, sid)
    assert [r for r in d["recent"] if "port-scan" in r] == [d["recent"][0]], d["recent"]
    assert scans_total(node) == before + 1
    assert sum(marker in l for l in node.log_tail(2000).splitlines()) == 1
    unharmed()
