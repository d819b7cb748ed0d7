// Who an E2B envd call acts as (api/e2b_user.hpp): E2B's `user` in its home
// when the sandbox has one, the sandbox's own default otherwise, a named
// user from its /etc/passwd or a clear refusal; relative paths from home.
#include <catch2/catch.hpp>

#include "api/e2b_codec.hpp"
#include "api/e2b_user.hpp"

namespace dsec::e2b {

namespace {

constexpr const char* passwd = "root:x:0:0:root:/root:/bin/bash\n"
                               "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
                               "user:x:1000:1000::/home/user:/bin/bash\n";

} // namespace

TEST_CASE("an E2B call defaults to user in /home/user when the sandbox has it", "[unit][e2b]") {
  auto who = identity_of(passwd, "");
  REQUIRE(who);
  CHECK(who->user == "user");
  CHECK(who->home == "/home/user");
  CHECK(who->uid == 1000);
  CHECK(who->gid == 1000);
}

TEST_CASE("a sandbox without user keeps its own default user and /", "[unit][e2b]") {
  auto who = identity_of("root:x:0:0:root:/root:/bin/sh\n", "");
  REQUIRE(who);
  CHECK(who->user.empty());
  CHECK(who->home == "/");
  CHECK(identity_of("", "")->user.empty());
  // A broken entry is no user.
  CHECK(identity_of("user:x:abc:1000::/home/user:/bin/bash\n", "")->user.empty());
}

TEST_CASE("a named user comes from the sandbox's passwd, or is refused", "[unit][e2b]") {
  auto root = identity_of(passwd, "root");
  REQUIRE(root);
  CHECK(root->user == "root");
  CHECK(root->home == "/root");
  CHECK(root->uid == 0);
  auto missing = identity_of(passwd, "alice");
  REQUIRE_FALSE(missing);
  CHECK(missing.err().code == errc::invalid_argument);
  CHECK(missing.err().message.find("alice") != std::string::npos);
  CHECK_FALSE(identity_of("", "root"));
}

TEST_CASE("Authorization Basic names the user; Bearer and nothing name none", "[unit][e2b]") {
  CHECK(*basic_auth_user("Basic dXNlcjo=") == "user");   // "user:"
  CHECK(*basic_auth_user("basic cm9vdDo=") == "root");   // "root:"
  CHECK(*basic_auth_user("Basic cm9vdA==") == "root");   // "root", no colon
  CHECK(basic_auth_user("")->empty());
  CHECK(basic_auth_user("Bearer e2b_abc")->empty());
  for (auto bad : {"Basic ", "Basic !!!", "Basic Og==" /* ":" */, "Basic Lzo=" /* "/:" */})
    CHECK(basic_auth_user(bad).err().code == errc::invalid_argument);
}

TEST_CASE("relative paths and cwd start at the caller's home", "[unit][e2b]") {
  CHECK(*sandbox_path("test_write.txt", "/home/user") == "/home/user/test_write.txt");
  CHECK(*sandbox_path("a/b", "/home/user/") == "/home/user/a/b");
  CHECK(*sandbox_path("/etc/x", "/home/user") == "/etc/x");
  CHECK(*sandbox_path("x") == "/x"); // native default: from /
  CHECK_FALSE(sandbox_path("../../etc", "/home/user"));
  CHECK(parse_fs(R"({"path":"d"})", false, "/home/user")->path == "/home/user/d");
  auto mv = parse_fs(R"({"source":"a","destination":"/b"})", true, "/root");
  CHECK(mv->path == "/root/a");
  CHECK(mv->to == "/b");
  bool pty = false;
  auto start = parse_start(R"({"process":{"cmd":"ls","cwd":"sub"}})", pty, nullptr, "/home/user");
  CHECK(start->cwd == "/home/user/sub");
  CHECK(parse_start(R"({"process":{"cmd":"ls"}})", pty, nullptr, "/home/user")->cwd.empty());
}

} // namespace dsec::e2b

namespace dsec::e2b {

TEST_CASE("entries show the sandbox's own user and group names", "[unit][e2b]") {
  auto names = owner_names_of(passwd, "root:x:0:\nuser:x:1000:\nbroken\nstaff:x:50:\n");
  fs_entry e;
  e.name = "f";
  e.path = "/home/user/f";
  e.type = "file";
  e.uid = 1000;
  e.gid = 50;
  auto j = encode_entry(e, &names);
  CHECK(j.find("\"owner\":\"user\"") != std::string::npos);
  CHECK(j.find("\"group\":\"staff\"") != std::string::npos);
  e.uid = 4242;
  CHECK(encode_entry(e, &names).find("\"owner\":\"4242\"") != std::string::npos);
  CHECK(encode_entry(e).find("\"group\":\"50\"") != std::string::npos); // no names: numbers
}

} // namespace dsec::e2b
