// Unit tests of the layer store: name and ref validation, digests, the
// catalog format, building and resolving layers, conflicts, reproducible
// digests, corrupt catalogs, concurrent builders, the busybox tree and the
// apt mirror parser. They run mkfs.erofs but need no root and mount nothing.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "layers/catalog.hpp"
#include "layers/defaults.hpp"
#include "layers/digest.hpp"
#include "layers/store.hpp"
#include "sys/fs.hpp"
#include "temp_dir.hpp"

using namespace dsec;
using namespace dsec::layers;

namespace {

using test::temp_dir;

void write(const std::string& path, const std::string& data) {
  auto slash = path.rfind('/');
  REQUIRE(sys::make_dirs(path.substr(0, slash)));
  REQUIRE(sys::write_file_atomic(path, data));
}

// A small tree that passes the base-layer check.
std::string make_tree(const std::string& dir, const std::string& content) {
  write(dir + "/bin/hello", content);
  write(dir + "/etc/motd", "hi\n");
  REQUIRE(sys::make_dirs(dir + "/empty"));
  return dir;
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

} // namespace

TEST_CASE("layer names are validated", "[layers]") {
  struct row { std::string name; bool ok; };
  std::vector<row> rows = {
    {"base/busybox", true}, {"ws/django-15202", true}, {"a", true}, {"9", true},
    {"toolkit/swe.v2_x", true}, {std::string(128, 'a'), true},
    {"", false}, {std::string(129, 'a'), false}, {"Base/x", false}, {"/base", false},
    {"base/", false}, {"a/../b", false}, {"a..b", false}, {"a//b", false}, {"-a", false},
    {".a", false}, {"_a", false}, {"a b", false}, {"a@b", false}, {"a\\b", false},
    {"a:b", false},
  };
  for (auto& r : rows) {
    INFO("name \"" << r.name << "\"");
    auto st = validate_name(r.name);
    CHECK(st.ok() == r.ok);
    if (!r.ok)
      CHECK(st.err().code == errc::invalid_argument);
  }
}

TEST_CASE("layer versions and kinds are validated", "[layers]") {
  struct row { std::string v; bool ok; };
  std::vector<row> rows = {
    {"1", true}, {"3.11", true}, {"v1.2-rc_3", true}, {"ABC", true}, {std::string(64, '1'), true},
    {"", false}, {std::string(65, '1'), false}, {"1/2", false}, {"1 2", false}, {"a@b", false},
    {"\xc3\xa4", false},
  };
  for (auto& r : rows) {
    INFO("version \"" << r.v << "\"");
    CHECK(validate_version(r.v).ok() == r.ok);
  }
  for (auto k : {"base", "workspace", "toolkit", "snapshot"})
    CHECK(validate_kind(k));
  for (auto k : {"", "Base", "overlay", "ws"})
    CHECK_FALSE(validate_kind(k));
}

TEST_CASE("layer refs parse into name and version", "[layers]") {
  auto r = parse_ref("base/python@3.11");
  REQUIRE(r);
  CHECK(r->name == "base/python");
  CHECK(r->version == "3.11");
  for (auto bad : {"", "base/python", "base/python@", "@1", "a@b@c", "Base@1", "a@1 2"}) {
    INFO("ref \"" << bad << "\"");
    auto p = parse_ref(bad);
    REQUIRE_FALSE(p);
    CHECK(p.err().code == errc::invalid_argument);
    CHECK(contains(p.err().message, std::string{"\""} + bad + "\""));
  }
}

TEST_CASE("sha256 digests of known strings and files", "[layers]") {
  CHECK(sha256_string("")
        == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_string("abc")
        == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  temp_dir t;
  write(t.path + "/f", "abc");
  auto d = sha256_file(t.path + "/f");
  REQUIRE(d);
  CHECK(*d == sha256_string("abc"));
  // Larger than one read chunk, so the streaming path is covered.
  std::string big(3 * (1 << 20) + 17, 'x');
  write(t.path + "/big", big);
  CHECK(*sha256_file(t.path + "/big") == sha256_string(big));
  auto missing = sha256_file(t.path + "/nope");
  REQUIRE_FALSE(missing);
  CHECK(missing.err().code == errc::not_found);
  CHECK(contains(missing.err().message, t.path + "/nope"));
}

TEST_CASE("digest spelling is checked", "[layers]") {
  auto good = sha256_string("x");
  CHECK(is_valid_digest(good));
  CHECK(digest_hex(good) == good.substr(7));
  for (auto bad : {std::string{}, good.substr(7), "sha256:" + std::string(63, 'a'),
                   "sha256:" + std::string(65, 'a'), "sha256:" + std::string(64, 'A'),
                   "sha512:" + std::string(64, 'a'), "sha256:" + std::string(63, 'a') + "/"}) {
    CHECK_FALSE(is_valid_digest(bad));
    CHECK(digest_hex(bad).empty());
  }
}

TEST_CASE("the catalog round-trips and rejects corrupt text", "[layers]") {
  catalog::entries e;
  layer_info a{"base/busybox@1", "base/busybox", "1", "base", sha256_string("a"), 4096, 1700000000123};
  layer_info b{"ws/x@2", "ws/x", "2", "workspace", sha256_string("b"), 1, 5};
  e[a.ref] = a;
  e[b.ref] = b;
  auto text = catalog::serialize(e);
  auto back = catalog::parse(text, "cat.json");
  REQUIRE(back);
  REQUIRE(back->size() == 2);
  auto& a2 = back->at(a.ref);
  CHECK(a2.name == a.name);
  CHECK(a2.version == a.version);
  CHECK(a2.kind == a.kind);
  CHECK(a2.digest == a.digest);
  CHECK(a2.size_bytes == a.size_bytes);
  CHECK(a2.created_at_ms == a.created_at_ms);
  CHECK(catalog::serialize(*back) == text);

  auto entry = [](const std::string& body) {
    return R"({"version":1,"layers":{"a@1":)" + body + "}}";
  };
  auto digest = sha256_string("a");
  std::vector<std::string> bad = {
    "", "{", "[]", "null", R"({"layers":{}})", R"({"version":2,"layers":{}})",
    R"({"version":1,"layers":[]})",
    entry("1"),
    entry(R"({"digest":")" + digest + R"(","size_bytes":1,"created_at_ms":1})"),
    entry(R"({"kind":"base","digest":"sha256:zz","size_bytes":1,"created_at_ms":1})"),
    entry(R"({"kind":"base","digest":")" + digest + R"(","size_bytes":"1","created_at_ms":1})"),
    entry(R"({"kind":"base","digest":")" + digest + R"(","size_bytes":1})"),
    R"({"version":1,"layers":{"Bad Ref":{"kind":"base","digest":")" + digest
      + R"(","size_bytes":1,"created_at_ms":1}}})",
  };
  for (auto& t : bad) {
    INFO("catalog text: " << t);
    auto r = catalog::parse(t, "/s/catalog.json");
    REQUIRE_FALSE(r);
    CHECK(contains(r.err().message, "/s/catalog.json"));
  }
  auto empty = catalog::parse(R"({"version":1,"layers":{}})", "x");
  REQUIRE(empty);
  CHECK(empty->empty());
}

TEST_CASE("a built layer resolves, lists and has its blob", "[layers]") {
  temp_dir t;
  auto s = store::open(t.path + "/store");
  REQUIRE(s);
  CHECK(s->list().empty());
  auto src = make_tree(t.path + "/src", "hello\n");
  auto info = s->build(src, "base/test", "1", "base");
  REQUIRE(info);
  CHECK(info->ref == "base/test@1");
  CHECK(info->kind == "base");
  CHECK(is_valid_digest(info->digest));
  CHECK(info->size_bytes > 0);
  CHECK(info->created_at_ms > 1700000000000);
  auto blob = s->blob_path(info->digest);
  CHECK(blob == t.path + "/store/blobs/sha256-" + digest_hex(info->digest) + ".erofs");
  auto on_disk = sha256_file(blob);
  REQUIRE(on_disk);
  CHECK(*on_disk == info->digest);

  auto again = store::open(t.path + "/store/"); // a second handle sees the catalog
  REQUIRE(again);
  auto r = again->resolve("base/test@1");
  REQUIRE(r);
  CHECK(r->digest == info->digest);
  CHECK(r->created_at_ms == info->created_at_ms);
  auto all = again->list();
  REQUIRE(all.size() == 1);
  CHECK(all[0].ref == "base/test@1");
  // Nothing but the blob remains: temp images are renamed or removed.
  CHECK(sys::exists(t.path + "/store/tmp"));
  CHECK_FALSE(sys::exists(t.path + "/store/catalog.json.tmp"));
}

TEST_CASE("resolve reports missing and malformed refs", "[layers]") {
  temp_dir t;
  auto s = store::open(t.path);
  REQUIRE(s);
  auto missing = s->resolve("base/nope@1");
  REQUIRE_FALSE(missing);
  CHECK(missing.err().code == errc::not_found);
  CHECK(contains(missing.err().message, "base/nope@1"));
  auto bad = s->resolve("no-version");
  REQUIRE_FALSE(bad);
  CHECK(bad.err().code == errc::invalid_argument);
  CHECK(s->blob_path("sha256:short").empty());
}

TEST_CASE("build rejects bad sources and arguments before running mkfs", "[layers]") {
  temp_dir t;
  auto s = store::open(t.path + "/store");
  REQUIRE(s);
  write(t.path + "/file", "x");
  write(t.path + "/ws/src/main.py", "print(1)\n");
  struct row { std::string src, name, version, kind; errc code; std::string says; };
  std::vector<row> rows = {
    {t.path + "/none", "ws/a", "1", "workspace", errc::not_found, t.path + "/none"},
    {t.path + "/file", "ws/a", "1", "workspace", errc::invalid_argument, "not a directory"},
    {t.path + "/ws", "base/a", "1", "base", errc::invalid_argument, "root file system"},
    {t.path + "/ws", "Bad", "1", "workspace", errc::invalid_argument, "layer name"},
    {t.path + "/ws", "ws/a", "1/2", "workspace", errc::invalid_argument, "layer version"},
    {t.path + "/ws", "ws/a", "1", "layer", errc::invalid_argument, "layer kind"},
    {t.path, "ws/a", "1", "workspace", errc::invalid_argument, "contains the layer store"},
  };
  for (auto& r : rows) {
    INFO(r.src << " " << r.name << "@" << r.version << " " << r.kind);
    auto res = s->build(r.src, r.name, r.version, r.kind);
    REQUIRE_FALSE(res);
    CHECK(res.err().code == r.code);
    CHECK(contains(res.err().message, r.says));
  }
  CHECK(s->build(t.path + "/ws", "ws/a", "1", "workspace"));
}

TEST_CASE("the same tree gives the same digest", "[layers]") {
  temp_dir t;
  auto s1 = store::open(t.path + "/s1");
  auto s2 = store::open(t.path + "/s2");
  REQUIRE(s1);
  REQUIRE(s2);
  auto a = s1->build(make_tree(t.path + "/a", "same\n"), "base/a", "1", "base");
  // Written later, so every mtime and inode differs; the image must not.
  ::sleep(1);
  auto b = s2->build(make_tree(t.path + "/b", "same\n"), "base/b", "7", "base");
  auto c = s1->build(make_tree(t.path + "/c", "other\n"), "base/c", "1", "base");
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK(a->digest == b->digest);
  CHECK(a->digest != c->digest);
  CHECK(*sha256_file(s1->blob_path(a->digest)) == *sha256_file(s2->blob_path(b->digest)));
}

TEST_CASE("a ref is immutable: same content is fine, other content conflicts", "[layers]") {
  temp_dir t;
  auto s = store::open(t.path + "/store");
  REQUIRE(s);
  auto first = s->build(make_tree(t.path + "/a", "v1\n"), "ws/x", "1", "workspace");
  REQUIRE(first);
  auto same = s->build(make_tree(t.path + "/b", "v1\n"), "ws/x", "1", "workspace");
  REQUIRE(same);
  CHECK(same->digest == first->digest);
  CHECK(same->created_at_ms == first->created_at_ms);
  auto other = s->build(make_tree(t.path + "/c", "v2\n"), "ws/x", "1", "workspace");
  REQUIRE_FALSE(other);
  CHECK(other.err().code == errc::conflict);
  CHECK(contains(other.err().message, "ws/x@1"));
  CHECK(contains(other.err().message, first->digest));
  CHECK(s->resolve("ws/x@1")->digest == first->digest);
  CHECK(s->list().size() == 1);
}

TEST_CASE("a garbage catalog is a clear error, not a crash", "[layers]") {
  temp_dir t;
  write(t.path + "/catalog.json", "{\"version\":1,\"layers\":{\"a@1\": tru");
  auto s = store::open(t.path);
  REQUIRE_FALSE(s);
  CHECK(contains(s.err().message, t.path + "/catalog.json"));
  CHECK(contains(s.err().message, "not valid JSON"));

  // Corrupted after open: queries and builds fail, list() is empty.
  temp_dir u;
  auto s2 = store::open(u.path);
  REQUIRE(s2);
  write(u.path + "/catalog.json", "\x01\x02garbage");
  CHECK(s2->list().empty());
  auto l = s2->try_list();
  REQUIRE_FALSE(l);
  CHECK(contains(l.err().message, "catalog.json"));
  CHECK_FALSE(s2->resolve("a@1"));
  auto b = s2->build(make_tree(u.path + "/src", "x"), "base/a", "1", "base");
  REQUIRE_FALSE(b);
  CHECK(contains(b.err().message, "catalog.json"));
  // The store did not overwrite what it could not read.
  CHECK(*sys::read_file(u.path + "/catalog.json") == "\x01\x02garbage");
}

TEST_CASE("concurrent builds of different refs keep every entry", "[layers]") {
  temp_dir t;
  constexpr int per_thread = 4;
  auto worker = [&](int id) {
    // Each thread has its own store handle, as separate processes would.
    auto s = store::open(t.path + "/store");
    for (int i = 0; i < per_thread; ++i) {
      auto name = "ws/t" + std::to_string(id) + "-" + std::to_string(i);
      auto src = make_tree(t.path + "/" + std::to_string(id) + "-" + std::to_string(i), name);
      auto info = s->build(src, name, "1", "workspace");
      CHECK(info.ok());
    }
  };
  std::thread a{worker, 0}, b{worker, 1};
  a.join();
  b.join();
  auto s = store::open(t.path + "/store");
  REQUIRE(s);
  auto all = s->try_list();
  REQUIRE(all);
  CHECK(all->size() == 2 * per_thread);
  for (auto& l : *all)
    CHECK(sys::exists(s->blob_path(l.digest)));
}

TEST_CASE("the busybox tree has applets, users and fixed modes", "[layers]") {
  if (!sys::exists("/bin/busybox"))
    FAIL("/bin/busybox is missing: install busybox-static");
  temp_dir t;
  REQUIRE(sys::make_dirs(t.path + "/a"));
  REQUIRE(make_busybox_rootfs("/bin/busybox", t.path + "/a"));
  auto link = [&](const std::string& rel) {
    char buf[256] = {};
    auto n = ::readlink((t.path + "/a/" + rel).c_str(), buf, sizeof(buf) - 1);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string{};
  };
  CHECK(link("bin/sh") == "busybox");
  CHECK(link("usr/bin/env") == "../../bin/busybox");
  struct stat st;
  REQUIRE(::stat((t.path + "/a/tmp").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 01777);
  REQUIRE(::stat((t.path + "/a/bin/busybox").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0755);
  CHECK(contains(*sys::read_file(t.path + "/a/etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n"));
  CHECK(sys::exists(t.path + "/a/etc/group"));
  CHECK_FALSE(sys::exists(t.path + "/a/etc/hostname"));
  for (auto d : {"proc", "sys", "dev", "work", "root"})
    CHECK(sys::exists(t.path + "/a/" + d));

  // Built twice, the busybox layer has one digest.
  REQUIRE(sys::make_dirs(t.path + "/b"));
  REQUIRE(make_busybox_rootfs("/bin/busybox", t.path + "/b"));
  auto s = store::open(t.path + "/store");
  auto x = s->build(t.path + "/a", "base/bb", "1", "base");
  auto y = s->build(t.path + "/b", "base/bb", "2", "base");
  REQUIRE(x);
  REQUIRE(y);
  CHECK(x->digest == y->digest);
}

TEST_CASE("the Debian mirror comes from apt sources", "[layers]") {
  std::string deb822 =
    "Types: deb\n# comment\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
    "Components: main\n\nTypes: deb\nURIs: http://security.example/debian-security\n"
    "Suites: bookworm-security\n";
  std::string security_only = "Types: deb\nURIs: http://sec/x\nSuites: bookworm-security\n";
  std::string disabled = "Types: deb\nURIs: http://off/x\nSuites: bookworm\nEnabled: no\n";
  std::string src_only = "Types: deb-src\nURIs: http://src/x\nSuites: bookworm\n";
  std::string list = "# deb http://old/ bookworm main\n"
                     "deb [arch=amd64 signed-by=/k.gpg] http://list.example/debian bookworm main\n";
  struct row { std::string d, l, want; };
  std::vector<row> rows = {
    {deb822, list, "http://mirror.example/debian"},
    {security_only, list, "http://list.example/debian"},
    {disabled, "", "http://deb.debian.org/debian"},
    {src_only, "deb http://plain/debian bookworm main", "http://plain/debian"},
    {"", "deb http://other/debian bullseye main", "http://deb.debian.org/debian"},
    {"", "", "http://deb.debian.org/debian"},
  };
  for (auto& r : rows) {
    INFO(r.d << "|" << r.l);
    CHECK(pick_debian_mirror(r.d, r.l) == r.want);
  }
}
