// sudo without setuid (backends/init/sudo_proto.hpp): the request wire and
// who may use it.
#include <catch2/catch.hpp>

#include "backends/init/sudo_proto.hpp"

using namespace dsec::init::sudo_proto;

TEST_CASE("a sudo request round-trips", "[unit][sudo]") {
  request r{"user:staff", "/home/user", {"/usr/bin/env", "a b", ""}, {"PATH=/bin", "X="}};
  request back;
  REQUIRE(decode(encode(r), back).empty());
  CHECK(back.user == r.user);
  CHECK(back.cwd == r.cwd);
  CHECK(back.argv == r.argv);
  CHECK(back.env == r.env);
}

TEST_CASE("malformed sudo requests are refused with a reason", "[unit][sudo]") {
  request ok{"", "/", {"/bin/true"}, {}};
  auto good = encode(ok);
  request out;
  CHECK(!decode("", out).empty());
  CHECK(!decode(good.substr(0, good.size() - 1), out).empty()); // not NUL-terminated
  CHECK(decode(std::string("dsec-sudo 2") + good.substr(magic.size()), out).find("dsec-sudo 1")
        != std::string::npos);
  CHECK(!decode(good + "x", out).empty());                         // trailing bytes
  CHECK(!decode(encode(request{"", "/", {}, {}}), out).empty());   // no command
  CHECK(!decode(encode(request{"", "/", {""}, {}}), out).empty()); // empty name
  CHECK(!decode(encode(request{"", "rel", {"/bin/true"}, {}}), out).empty());
  // A count larger than the entries that follow.
  std::string lying = std::string(magic) + '\0' + '\0' + "/" + '\0' + "5" + '\0' + "a" + '\0';
  CHECK(!decode(lying, out).empty());
  std::string huge = std::string(magic) + '\0' + '\0' + "/" + '\0' + "99999999" + '\0';
  CHECK(!decode(huge, out).empty());
  CHECK(!decode(std::string(max_request + 1, '\0'), out).empty());
}

TEST_CASE("sudo is for root and the users the policy names", "[unit][sudo]") {
  std::string passwd = "root:x:0:0:root:/root:/bin/bash\n"
                       "user:x:1000:1000::/home/user:/bin/bash\n"
                       "bob:x:1001:1001::/home/bob:/bin/sh\n";
  CHECK(refusal(0, "", "").empty());
  CHECK(refusal(1000, "user\n", passwd).empty());
  CHECK(refusal(1000, "# comment\n  user  \r\n", passwd).empty());
  CHECK(refusal(1001, "1001\n", passwd).empty());
  CHECK(!refusal(1001, "user\n", passwd).empty());
  CHECK(!refusal(1000, "", passwd).empty());
  CHECK(!refusal(1000, "#user\n", passwd).empty());
  CHECK(!refusal(1000, "alice\n", passwd).empty()); // a name the sandbox lacks
  CHECK(refusal(65534, "user\n", passwd).find("/etc/dsec/sudo-users") != std::string::npos);
}

TEST_CASE("only a terminal's or kill's signals are forwarded", "[unit][sudo]") {
  for (int s : {1, 2, 3, 10, 12, 15, 28})
    CHECK(forwardable(s));
  for (int s : {0, 9, 19, 17, 64, -1})
    CHECK_FALSE(forwardable(s));
}
