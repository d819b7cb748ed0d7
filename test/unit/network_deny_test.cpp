// network.deny and E2B's denyOut (core/deny_list.hpp, backends/net/deny_list.hpp,
// api/e2b_create.hpp) and E2B's maskRequestHost (core/host_mask.hpp,
// api/e2b_host_mask.hpp): the grammar, the kernel's rule order, the mapping
// of E2B's bodies and the Host a port sees.
#include <catch2/catch.hpp>

#include "api/e2b_create.hpp"
#include "api/e2b_host_mask.hpp"
#include "backends/net/deny_list.hpp"
#include "core/deny_list.hpp"
#include "core/host_mask.hpp"
#include "core/json_codec.hpp"
#include "core/validate.hpp"

using namespace dsec;

TEST_CASE("network.deny takes addresses and CIDRs, never names", "[unit][deny]") {
  auto ok = net::parse_deny_list({"8.8.8.8:*", "10.0.0.0/8:443", "[2001:db8::/32]:*"});
  REQUIRE(ok);
  CHECK(ok->size() == 3);
  CHECK((*ok)[0].prefix == 128);
  CHECK((*ok)[1].prefix == 96 + 8);
  CHECK((*ok)[1].port == 443);
  for (auto [entry, why] : std::vector<std::pair<const char*, const char*>>{
         {"example.com:*", "a domain cannot be denied"},
         {"pypi", "egress source name"},
         {"10.0.0.1/8:*", "host bits"},
         {"8.8.8.8", "network.deny entry \"8.8.8.8\""}}) {
    auto bad = net::parse_deny_list({entry});
    REQUIRE(!bad);
    CHECK(bad.err().code == errc::invalid_argument);
    CHECK(bad.err().message.find("network.deny entry") != std::string::npos);
    CHECK(bad.err().message.find(why) != std::string::npos);
  }
}

TEST_CASE("catch-all allow entries are the open internet", "[unit][deny]") {
  auto all4 = net::parse_allow_entry("0.0.0.0/0:*");
  auto all6 = net::parse_allow_entry("[::/0]:443");
  auto some = net::parse_allow_entry("0.0.0.0/1:*");
  auto one = net::parse_allow_entry("1.1.1.1:*");
  REQUIRE((all4 && all6 && some && one));
  CHECK(net::is_catch_all(*all4));
  CHECK(net::is_catch_all(*all6));
  CHECK(!net::is_catch_all(*some));
  CHECK(!net::is_catch_all(*one));
}

TEST_CASE("kernel rules: narrow allows, then denies, then catch-alls", "[unit][deny]") {
  auto r = [](int prefix) { return net::rule{{}, prefix, 0}; };
  auto d = net::deny_rule(*net::parse_allow_entry("8.8.8.8:53"));
  CHECK(d.deny);
  CHECK(d.port == 53);
  auto out = net::ordered_rules({r(128), r(120)}, {d}, {r(96)}, 128);
  REQUIRE(out);
  REQUIRE(out->size() == 4);
  CHECK((*out)[0].prefix == 128);
  CHECK((*out)[1].prefix == 120);
  CHECK((*out)[2].deny);
  CHECK((*out)[3].prefix == 96);
  // Over the kernel's room, narrow allows go first: denies always stay.
  out = net::ordered_rules({r(128), r(127), r(126)}, {d}, {r(96)}, 3);
  REQUIRE(out);
  REQUIRE(out->size() == 3);
  CHECK((*out)[0].prefix == 128);
  CHECK((*out)[1].deny);
  CHECK((*out)[2].prefix == 96);
  auto none = net::ordered_rules({}, {d, d}, {r(96)}, 2);
  REQUIRE(!none);
  CHECK(none.err().message.find("holds 2") != std::string::npos);
}

TEST_CASE("native specs take network.deny", "[unit][deny]") {
  auto s = json_codec::parse_spec(
    R"({"layers":["base/busybox@1"],"network":{"allow":["0.0.0.0/0:*"],"deny":["10.0.0.0/8:*"]}})");
  REQUIRE(s);
  CHECK(s->network.deny == std::vector<std::string>{"10.0.0.0/8:*"});
  auto bad = json_codec::parse_spec(
    R"({"layers":["base/busybox@1"],"network":{"allow":["0.0.0.0/0:*"],"deny":["pypi.org:*"]}})");
  REQUIRE(!bad);
  CHECK(bad.err().message.find("network.deny entry \"pypi.org:*\"") != std::string::npos);
  auto p = json_codec::parse_network_policy(R"({"allow":["0.0.0.0/0:*"],"deny":["1.2.3.4:*"]})");
  REQUIRE(p);
  CHECK(p->deny == std::vector<std::string>{"1.2.3.4:*"});
  CHECK(!json_codec::parse_network_policy(R"({"allow":[],"denied":["1.2.3.4:*"]})"));
  // Records keep it (a restarted node applies the same list).
  sandbox_spec spec;
  spec.layers = {"base/busybox@1"};
  spec.network.allow = {"0.0.0.0/0:*"};
  spec.network.deny = {"1.2.3.4:*"};
  auto back = json_codec::parse_spec(json_codec::encode(spec));
  REQUIRE(back);
  CHECK(back->network.deny == spec.network.deny);
}

TEST_CASE("E2B denyOut closes addresses of an open internet; allowOut wins", "[unit][deny][e2b]") {
  using e2b::apply_create_options;
  sandbox_spec s;
  const std::vector<std::string> all = {"0.0.0.0/0:*", "[::/0]:*"};
  REQUIRE(apply_create_options(R"({"allow_internet_access":true,
                                   "network":{"denyOut":["8.8.8.8","10.0.0.0/8"]}})", s, true));
  CHECK(s.network.allow == all);
  CHECK(s.network.deny == std::vector<std::string>{"8.8.8.8:*", "10.0.0.0/8:*"});
  // Absent allow_internet_access is E2B's default (open) beside a deny.
  REQUIRE(apply_create_options(R"({"network":{"denyOut":["8.8.8.8"]}})", s, true));
  CHECK(s.network.allow == all);
  CHECK(s.network.deny == std::vector<std::string>{"8.8.8.8:*"});
  // allowOut stays before the catch-alls: it wins over the deny.
  REQUIRE(apply_create_options(R"({"network":{"allowOut":["8.8.8.8"],"denyOut":["8.8.8.8"]}})",
                               s, true));
  CHECK(s.network.allow == std::vector<std::string>{"8.8.8.8:*", "0.0.0.0/0:*", "[::/0]:*"});
  CHECK(s.network.deny == std::vector<std::string>{"8.8.8.8:*"});
  // allowOut 0.0.0.0/0 is a catch-all too: the deny closes 1.2.3.4 in it.
  REQUIRE(apply_create_options(R"({"network":{"allowOut":["0.0.0.0/0"],"denyOut":["1.2.3.4"]}})",
                               s, true));
  CHECK(s.network.deny == std::vector<std::string>{"1.2.3.4:*"});
  // Closed internet: denies change nothing and are not kept.
  REQUIRE(apply_create_options(R"({"allow_internet_access":false,"network":{
                                   "allowOut":["1.1.1.1"],"denyOut":["8.8.8.8"]}})", s, true));
  CHECK(s.network.allow == std::vector<std::string>{"1.1.1.1:*"});
  CHECK(s.network.deny.empty());
  REQUIRE(apply_create_options(R"({"network":{"allowOut":["1.1.1.1"],
                                   "denyOut":["0.0.0.0/0","8.8.8.8"]}})", s, true));
  CHECK(s.network.allow == std::vector<std::string>{"1.1.1.1:*"});
  CHECK(s.network.deny.empty());
  // The open internet without a deny keeps only the catch-alls.
  REQUIRE(apply_create_options(R"({"allow_internet_access":true,
                                   "network":{"allowOut":["1.1.1.1"]}})", s, true));
  CHECK(s.network.allow == all);
  CHECK(s.network.deny.empty());
  auto st = apply_create_options(R"({"network":{"denyOut":["example.com"]}})", s, true);
  REQUIRE(!st);
  CHECK(st.err().message.find("network.denyOut \"example.com\"") != std::string::npos);
  auto p = e2b::parse_network_update(R"({"denyOut":["8.8.8.8"]})", "n1.a");
  REQUIRE(p);
  CHECK(p->allow == all);
  CHECK(p->deny == std::vector<std::string>{"8.8.8.8:*"});
  p = e2b::parse_network_update(R"({"allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"]})", "n1.a");
  REQUIRE(p);
  CHECK(p->deny.empty());
}

TEST_CASE("host masks: checked, ${PORT} replaced", "[unit][e2b][host_mask]") {
  CHECK(masked_host("custom-host.example.com:${PORT}", 8080) == "custom-host.example.com:8080");
  CHECK(masked_host("${PORT}-x.${PORT}", 3) == "3-x.3");
  CHECK(masked_host("plain.test", 3) == "plain.test");
  CHECK(check_host_mask("localhost:${PORT}", "m"));
  CHECK(check_host_mask("[::1]:80", "m"));
  for (auto bad : {"", "a b", "evil\r\nX-Injected: 1", "a/b", "${HOST}"}) {
    auto st = check_host_mask(bad, "mask");
    REQUIRE(!st);
    CHECK(st.err().code == errc::invalid_argument);
  }
  auto m = e2b::host_mask_of_create(R"({"network":{"maskRequestHost":"h.test:${PORT}"}})");
  REQUIRE(m);
  CHECK(*m == "h.test:${PORT}");
  m = e2b::host_mask_of_create(R"({"templateID":"base"})");
  REQUIRE(m);
  CHECK(m->empty());
  for (auto body : {R"({"network":{"maskRequestHost":1}})",
                    R"({"network":{"maskRequestHost":"a\r\nb"}})"}) {
    auto e = e2b::host_mask_of_create(body);
    REQUIRE(!e);
    CHECK(e.err().message.find("network.maskRequestHost") != std::string::npos);
  }
  // A native creator's label is held to the same rule.
  sandbox_spec s;
  s.layers = {"base/busybox@1"};
  s.labels[host_mask_label] = "x y";
  auto st = validate(s);
  REQUIRE(!st);
  CHECK(st.err().message.find(host_mask_label) != std::string::npos);
}
