// Layer exec defaults: the merge of a stack's configs and the user grammar.
#include <catch2/catch.hpp>

#include "core/layer_config.hpp"

using namespace dsec;

TEST_CASE("layer configs merge bottom to top, the topmost setting wins") {
  layer_config base{{{"PATH", "/bin"}, {"LANG", "C"}}, "/", "nobody"};
  layer_config mid{{{"LANG", "C.UTF-8"}, {"APP", "1"}}, "", ""};
  layer_config top{{}, "/work", ""};
  auto m = merge_layer_configs({base, mid, top});
  CHECK(m.env == std::map<std::string, std::string>{{"PATH", "/bin"}, {"LANG", "C.UTF-8"},
                                                    {"APP", "1"}});
  CHECK(m.workdir == "/work");  // top sets it
  CHECK(m.user == "nobody");    // only the base sets it
  auto none = merge_layer_configs({});
  CHECK(none.env.empty());
  CHECK(none.workdir.empty());
  CHECK(none.user.empty());
  // A spec's env wins over the layers' env, key by key.
  auto env = overlay_env(m.env, {{"LANG", "fr_FR"}});
  CHECK(env.at("LANG") == "fr_FR");
  CHECK(env.at("PATH") == "/bin");
}

TEST_CASE("users are names or numbers, optionally with a group") {
  for (auto* ok : {"root", "nobody", "app-user", "a.b_c", "1000", "0", "1000:1000", "app:staff",
                   "app:100", "1000:staff"})
    CHECK(validate_user(ok, "USER"));
  for (auto* bad : {"", ":", "app:", ":100", "-x", "a b", "a/b", "4294967295", "99999999999",
                    "1a", "app:grp:x", "ä"})
    CHECK_FALSE(validate_user(bad, "USER"));
  auto err = validate_user("a b", "exec user");
  CHECK(err.err().code == errc::invalid_argument);
  CHECK(err.err().message.find("exec user \"a b\"") != std::string::npos);
}

TEST_CASE("layer configs are checked before they are recorded") {
  CHECK(validate_layer_config({{{"A", "1"}}, "/w", "1000", {}}));
  CHECK_FALSE(validate_layer_config({{{"A=B", "1"}}, "", "", {}}));
  CHECK_FALSE(validate_layer_config({{{"", "1"}}, "", "", {}}));
  CHECK_FALSE(validate_layer_config({{}, "relative", "", {}}));
  CHECK_FALSE(validate_layer_config({{}, "", "bad user", {}}));
}

// -- the sandbox init's user lookup (backends/init/exec_user.hpp) -------------

#include "backends/init/exec_user.hpp"

TEST_CASE("exec users resolve through the sandbox's passwd and group files") {
  const char* passwd = "root:x:0:0:root:/root:/bin/sh\n"
                       "# comment\n"
                       "app:x:1000:1001:App:/home/app:/bin/sh\n"
                       "broken line\n"
                       "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
  const char* group = "root:x:0:\nstaff:x:50:app,other\napp:x:1001:\nwheel:x:10:other,app\n";
  init::exec_identity id;
  REQUIRE(init::resolve_exec_user("app", passwd, group, id).empty());
  CHECK(id.uid == 1000);
  CHECK(id.gid == 1001);
  CHECK(id.home == "/home/app");
  CHECK(id.groups == std::vector<gid_t>{1001, 50, 10});
  REQUIRE(init::resolve_exec_user("1000", passwd, group, id).empty());
  CHECK(id.uid == 1000);
  CHECK(id.gid == 1001); // the passwd entry's
  REQUIRE(init::resolve_exec_user("4242", passwd, group, id).empty());
  CHECK(id.uid == 4242);
  CHECK(id.gid == 0);
  CHECK(id.groups == std::vector<gid_t>{0});
  REQUIRE(init::resolve_exec_user("app:staff", passwd, group, id).empty());
  CHECK(id.gid == 50);
  REQUIRE(init::resolve_exec_user("4242:77", passwd, group, id).empty());
  CHECK(id.uid == 4242);
  CHECK(id.gid == 77);
  CHECK(init::resolve_exec_user("bob", passwd, group, id)
        == "no user \"bob\" in the sandbox's /etc/passwd");
  CHECK(init::resolve_exec_user("app:nogroup", passwd, group, id)
        == "no group \"nogroup\" in the sandbox's /etc/group");
  CHECK_FALSE(init::resolve_exec_user("app:", passwd, group, id).empty());
}

// -- the catalog keeps exec defaults (layers/catalog.hpp) ----------------------

#include "layers/catalog.hpp"

TEST_CASE("the catalog keeps a layer's exec defaults; old entries without them load") {
  const std::string digest = "sha256:" + std::string(64, 'a');
  auto old = layers::catalog::parse(
    R"({"version":1,"layers":{"base/x@1":{"kind":"base","digest":")" + digest
      + R"(","size_bytes":1,"created_at_ms":2}}})",
    "catalog.json");
  REQUIRE(old);
  CHECK(old->at("base/x@1").config.env.empty());
  CHECK(old->at("base/x@1").config.user.empty());

  layers::catalog::entries e = *old;
  e["base/x@1"].config = layer_config{{{"PATH", "/opt/bin:/bin"}, {"A", "x y"}}, "/work", "app"};
  auto text = layers::catalog::serialize(e);
  CHECK(text.find("\"config\"") != std::string::npos);
  auto back = layers::catalog::parse(text, "catalog.json");
  REQUIRE(back);
  auto& c = back->at("base/x@1").config;
  CHECK(c.env == e["base/x@1"].config.env);
  CHECK(c.workdir == "/work");
  CHECK(c.user == "app");
  // A layer without defaults is written as before (no "config" key).
  CHECK(layers::catalog::serialize(*old).find("config") == std::string::npos);

  auto bad = layers::catalog::parse(
    R"({"version":1,"layers":{"base/x@1":{"kind":"base","digest":")" + digest
      + R"(","size_bytes":1,"created_at_ms":2,"config":{"workdir":"relative"}}}})",
    "catalog.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.err().message.find("base/x@1") != std::string::npos);
}

// -- the exec frame carries the user only when set (backends/channel/protocol.hpp)

#include "backends/channel/protocol.hpp"

TEST_CASE("exec frames carry a user when one is set, and are unchanged otherwise") {
  init_proto::exec_msg m;
  m.argv = {"id", "-u"};
  m.env = {"A=1"};
  m.cwd = "/w";
  auto plain = init_proto::encode(7, m);
  m.user = "app:staff";
  auto with_user = init_proto::encode(7, m);
  CHECK(with_user.size() == plain.size() + 4 + m.user.size());
  for (auto* frame : {&plain, &with_user}) {
    init_proto::exec_msg back;
    REQUIRE(init_proto::decode(std::string_view(*frame).substr(init_proto::header_size), back));
    CHECK(back.argv == m.argv);
    CHECK(back.cwd == "/w");
    CHECK(back.user == (frame == &plain ? "" : "app:staff"));
  }
}

// -- the store records an image's config (layers/store.hpp build_options) ------

#include <unistd.h>

#include "layers/digest.hpp"
#include "layers/store.hpp"
#include "temp_dir.hpp"

TEST_CASE("a layer built with an image's config keeps it: resolve, list, a peer's add_blob") {
  test::temp_dir t;
  REQUIRE(sys::make_dirs(t.path + "/src/bin"));
  REQUIRE(sys::write_file_atomic(t.path + "/src/bin/tool", "x\n"));
  auto s = layers::store::open(t.path + "/store");
  REQUIRE(s);
  layers::store::build_options opts;
  opts.config = layer_config{{{"PATH", "/opt/py/bin:/usr/bin:/bin"}, {"LANG", "C.UTF-8"}},
                             "/workspace", "1000:1000"};
  for (bool chunked : {false, true}) {
    opts.chunked = chunked;
    auto version = chunked ? "chunked" : "plain";
    auto built = s->build(t.path + "/src", "img/py", version, "base", opts);
    REQUIRE(built);
    auto back = s->resolve(std::string{"img/py@"} + version);
    REQUIRE(back);
    CHECK(back->config.env == opts.config.env);
    CHECK(back->config.workdir == "/workspace");
    CHECK(back->config.user == "1000:1000");
  }
  // Not part of the digest: the same tree without a config has the same
  // image, but the ref cannot change its defaults (immutable).
  auto plain = s->resolve("img/py@plain");
  auto bare = s->build(t.path + "/src", "img/bare", "1", "base");
  REQUIRE(bare);
  CHECK(bare->digest == plain->digest);
  CHECK(bare->config.env.empty());
  auto changed = opts;
  changed.chunked = false;
  changed.config.user = "0";
  auto again = s->build(t.path + "/src", "img/py", "plain", "base", changed);
  REQUIRE_FALSE(again);
  CHECK(again.err().code == errc::conflict);
  // A bad config is refused before anything is built.
  changed.config.workdir = "relative";
  auto bad = s->build(t.path + "/src", "img/bad", "1", "base", changed);
  REQUIRE_FALSE(bad);
  CHECK(bad.err().code == errc::invalid_argument);

  // A peer's copy (store::add_blob with the entry the peer sent) keeps it.
  auto peer = layers::store::open(t.path + "/peer");
  REQUIRE(peer);
  auto tmp = t.path + "/peer/tmp/fetch.erofs";
  REQUIRE(::link(s->blob_path(plain->digest).c_str(), tmp.c_str()) == 0);
  auto fetched = peer->add_blob(tmp, *plain);
  REQUIRE(fetched);
  auto there = peer->resolve("img/py@plain");
  REQUIRE(there);
  CHECK(there->config.workdir == "/workspace");
  CHECK(there->config.env == opts.config.env);
}

// -- a layer's start command (issue 26 part 4: the code interpreter's server) --

TEST_CASE("a layer's start command: the topmost wins, checked, kept by the catalog") {
  layer_config base{{}, "", "", {"/usr/bin/python3", "/srv/a.py"}};
  layer_config top{{}, "/work", "", {}};
  CHECK(merge_layer_configs({base, top}).start == base.start); // top sets none
  layer_config over{{}, "", "", {"/bin/server"}};
  CHECK(merge_layer_configs({base, over}).start == std::vector<std::string>{"/bin/server"});
  CHECK(validate_layer_config(base));
  CHECK_FALSE(validate_layer_config({{}, "", "", {""}}));
  CHECK_FALSE(validate_layer_config({{}, "", "", {"/bin/x", std::string("a\0b", 3)}}));

  const std::string digest = "sha256:" + std::string(64, 'b');
  auto e = layers::catalog::parse(
    R"({"version":1,"layers":{"base/ci@1":{"kind":"base","digest":")" + digest
      + R"(","size_bytes":1,"created_at_ms":2}}})",
    "catalog.json");
  REQUIRE(e);
  (*e)["base/ci@1"].config = base;
  auto back = layers::catalog::parse(layers::catalog::serialize(*e), "catalog.json");
  REQUIRE(back);
  CHECK(back->at("base/ci@1").config.start == base.start);
  auto bad = layers::catalog::parse(
    R"({"version":1,"layers":{"base/ci@1":{"kind":"base","digest":")" + digest
      + R"(","size_bytes":1,"created_at_ms":2,"config":{"start":"not a list"}}}})",
    "catalog.json");
  CHECK_FALSE(bad);
}
