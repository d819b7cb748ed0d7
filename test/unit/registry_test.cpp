// Table tests of the registry library's pure parts: the image reference
// grammar (core/image_reference.hpp) with docker.io normalisation, ports and
// digests; WWW-Authenticate challenges and token answers; docker config.json
// credentials; manifests, indexes, the platform pick and its error; the
// image config's exec defaults; --registry-mirror values; blob storage
// locations behind redirects.
#include <catch2/catch.hpp>

#include <string>

#include "core/image_reference.hpp"
#include "core/layer_ref.hpp"
#include "registry/auth.hpp"
#include "registry/image_pull.hpp"
#include "registry/manifest.hpp"
#include "registry/registry_options.hpp"
#include "registry/storage_locations.hpp"

using namespace dsec;
using namespace dsec::registry;

namespace {

const std::string d64 = "sha256:" + std::string(64, 'a');
const std::string e64 = "sha256:" + std::string(64, 'e');

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

} // namespace

TEST_CASE("image references: accepted forms and their canonical spelling", "[registry]") {
  struct row { std::string in, registry, repo, tag, digest, canonical, api_host; };
  const row rows[] = {
    {"python", "docker.io", "library/python", "latest", "", "docker.io/library/python:latest",
     "registry-1.docker.io"},
    {"python:3.11", "docker.io", "library/python", "3.11", "", "docker.io/library/python:3.11",
     "registry-1.docker.io"},
    {"team/swe-django:v1", "docker.io", "team/swe-django", "v1", "",
     "docker.io/team/swe-django:v1", "registry-1.docker.io"},
    {"docker.io/ubuntu", "docker.io", "library/ubuntu", "latest", "",
     "docker.io/library/ubuntu:latest", "registry-1.docker.io"},
    {"index.docker.io/library/ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", "",
     "docker.io/library/ubuntu:22.04", "registry-1.docker.io"},
    {"127.0.0.1:5000/img/base:1", "127.0.0.1:5000", "img/base", "1", "",
     "127.0.0.1:5000/img/base:1", "127.0.0.1:5000"},
    {"localhost/x", "localhost", "x", "latest", "", "localhost/x:latest", "localhost"},
    {"localhost:5000/a/b/c", "localhost:5000", "a/b/c", "latest", "",
     "localhost:5000/a/b/c:latest", "localhost:5000"},
    {"ghcr.io/org/a.b_c__d-e--f:TAG_1.x-y", "ghcr.io", "org/a.b_c__d-e--f", "TAG_1.x-y", "",
     "ghcr.io/org/a.b_c__d-e--f:TAG_1.x-y", "ghcr.io"},
    {"reg.example.com/x@" + d64, "reg.example.com", "x", "", d64, "reg.example.com/x@" + d64,
     "reg.example.com"},
    {"reg.example.com/x:1@" + d64, "reg.example.com", "x", "1", d64,
     "reg.example.com/x:1@" + d64, "reg.example.com"},
    {"[::1]:5000/x:2", "[::1]:5000", "x", "2", "", "[::1]:5000/x:2", "[::1]:5000"},
  };
  for (const auto& r : rows) {
    INFO(r.in);
    auto p = parse_image_reference(r.in);
    REQUIRE(p.ok());
    CHECK(p->registry == r.registry);
    CHECK(p->repository == r.repo);
    CHECK(p->tag == r.tag);
    CHECK(p->digest == r.digest);
    CHECK(p->str() == r.canonical);
    CHECK(p->api_host() == r.api_host);
    CHECK(p->manifest_ref() == (r.digest.empty() ? r.tag : r.digest));
    // The canonical spelling parses to itself.
    auto again = parse_image_reference(p->str());
    REQUIRE(again.ok());
    CHECK(again->str() == r.canonical);
  }
}

TEST_CASE("image references: refused forms name the rule", "[registry]") {
  struct row { std::string in, says; };
  const row rows[] = {
    {"", "empty"},
    {"Python", "repository \"Python\""},
    {"127.0.0.1:5000/", "repository \"\" is empty"},
    {"127.0.0.1:99999/x", "port must be 1-65535"},
    {"127.0.0.1:0/x", "port must be 1-65535"},
    {"127.0.0.1:ab/x", "port must be 1-65535"},
    {"reg.io/x:", "tag \"\" is empty"},
    {"reg.io/x:.bad", "tag \".bad\" must start"},
    {"reg.io/x:" + std::string(129, 'a'), "longer than 128"},
    {"reg.io/x@sha256:abc", "must be sha256:<64 lower-case hex>"},
    {"reg.io/x@md5:" + std::string(32, 'a'), "must be sha256"},
    {"reg.io/x@sha256:" + std::string(64, 'A'), "must be sha256"},
    {"reg.io/a//b", "component \"\""},
    {"reg.io/a..b", "component \"a..b\""},
    {"reg.io/-a", "component \"-a\""},
    {"reg.io/a_", "component \"a_\""},
    {"reg.io/a___b", "component \"a___b\""},
    {"reg.io/a b", "spaces"},
    {"re_g.io/x", "registry \"re_g.io\""},
    {"[::1/x", "unterminated IPv6"},
    {"reg.io/" + std::string(256, 'a'), "longer than 255"},
  };
  for (const auto& r : rows) {
    INFO(r.in);
    auto p = parse_image_reference(r.in);
    REQUIRE_FALSE(p.ok());
    CHECK(p.err().code == errc::invalid_argument);
    CHECK(contains(p.err().message, r.says));
  }
}

TEST_CASE("image references: told apart from layer refs", "[registry]") {
  CHECK(looks_like_image_reference("127.0.0.1:5000/x"));
  CHECK(looks_like_image_reference("python:3.11"));
  CHECK(looks_like_image_reference("reg.io/x"));
  CHECK(looks_like_image_reference("localhost/x"));
  CHECK(looks_like_image_reference("x@" + d64));
  CHECK_FALSE(looks_like_image_reference("base/python@3.11"));
  CHECK_FALSE(looks_like_image_reference("img/127.0.0.1-5000/x@sha256-0123"));
  CHECK_FALSE(looks_like_image_reference("python"));
}

TEST_CASE("auth: WWW-Authenticate challenges", "[registry]") {
  auto c = parse_challenges(
      "Bearer realm=\"https://auth.example/token\",service=\"registry.example\","
      "scope=\"repository:a/b:pull,push\"");
  REQUIRE(c.ok());
  REQUIRE(c->size() == 1);
  CHECK((*c)[0].scheme == "bearer");
  CHECK((*c)[0].param("realm") == "https://auth.example/token");
  CHECK((*c)[0].param("service") == "registry.example");
  CHECK((*c)[0].param("scope") == "repository:a/b:pull,push");

  auto b = parse_challenges("Basic realm=\"Registry Realm\"");
  REQUIRE(b.ok());
  CHECK((*b)[0].scheme == "basic");
  CHECK((*b)[0].param("realm") == "Registry Realm");

  // Two challenges, unquoted and escaped values, odd spacing and case.
  auto two = parse_challenges(
      "BEARER Realm=https://t/x , Service = \"a \\\"q\\\" b\", Basic realm=\"r,1\"");
  REQUIRE(two.ok());
  REQUIRE(two->size() == 2);
  CHECK((*two)[0].param("realm") == "https://t/x");
  CHECK((*two)[0].param("service") == "a \"q\" b");
  CHECK((*two)[1].scheme == "basic");
  CHECK((*two)[1].param("realm") == "r,1");

  CHECK_FALSE(parse_challenges("").ok());
  CHECK_FALSE(parse_challenges("Bearer realm=\"unterminated").ok());
  CHECK_FALSE(parse_challenges("=x").ok());
}

TEST_CASE("auth: token URL and token answers", "[registry]") {
  auto c = parse_challenges("Bearer realm=\"https://a/token?x=1\",service=\"reg 1\"");
  REQUIRE(c.ok());
  auto u = token_url((*c)[0], "repository:a/b:pull");
  REQUIRE(u.ok());
  CHECK(*u == "https://a/token?x=1&service=reg%201&scope=repository%3Aa%2Fb%3Apull");
  auto noscheme = parse_challenges("Bearer realm=\"ftp://a\"");
  CHECK_FALSE(token_url((*noscheme)[0], "s").ok());
  auto norealm = parse_challenges("Bearer service=x");
  CHECK_FALSE(token_url((*norealm)[0], "s").ok());

  auto t = parse_token_answer(R"({"token":"abc","expires_in":300})");
  REQUIRE(t.ok());
  CHECK(t->token == "abc");
  CHECK(t->expires_in == 300);
  auto a = parse_token_answer(R"({"access_token":"xyz"})");
  REQUIRE(a.ok());
  CHECK(a->token == "xyz");
  CHECK(a->expires_in == 60);
  auto shortlived = parse_token_answer(R"({"token":"s","expires_in":5})");
  CHECK(shortlived->expires_in == 60);
  CHECK_FALSE(parse_token_answer("{}").ok());
  CHECK_FALSE(parse_token_answer("not json").ok());
}

TEST_CASE("auth: docker config.json credentials", "[registry]") {
  auto b64 = base64_encode("alice:s3cr:et");
  std::string cfg = R"({"auths":{"127.0.0.1:5000":{"auth":")" + b64 + R"("},
    "https://index.docker.io/v1/":{"username":"bob","password":"pw"},
    "https://reg.example.com/v2/":{"auth":")" + base64_encode("carol:x") + R"("},
    "tok.example":{"identitytoken":"zzz"},
    "bad.example":{"auth":"!!!"},
    "nocolon.example":{"auth":")" + base64_encode("justuser") + R"("}},
    "credHelpers":{"helper.example":"ecr-login"}})";
  auto a = find_credentials(cfg, "cfg.json", "127.0.0.1:5000");
  REQUIRE(a.ok());
  REQUIRE(a->has_value());
  CHECK((*a)->username == "alice");
  CHECK((*a)->password == "s3cr:et");
  auto hub = find_credentials(cfg, "cfg.json", "docker.io");
  REQUIRE(hub.ok());
  REQUIRE(hub->has_value());
  CHECK((*hub)->username == "bob");
  auto url = find_credentials(cfg, "cfg.json", "reg.example.com");
  REQUIRE(url.ok());
  CHECK((*url)->username == "carol");
  auto none = find_credentials(cfg, "cfg.json", "other:5000");
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());

  auto tok = find_credentials(cfg, "cfg.json", "tok.example");
  REQUIRE_FALSE(tok.ok());
  CHECK(contains(tok.err().message, "identitytoken"));
  CHECK(contains(tok.err().message, "cfg.json"));
  CHECK_FALSE(find_credentials(cfg, "cfg.json", "bad.example").ok());
  CHECK(contains(find_credentials(cfg, "c", "nocolon.example").err().message, "user:password"));
  CHECK(contains(find_credentials(cfg, "c", "helper.example").err().message, "credHelpers"));
  CHECK(contains(find_credentials("[1]", "c.json", "x").err().message, "c.json"));
  auto empty = find_credentials("{}", "c", "x");
  REQUIRE(empty.ok());
  CHECK_FALSE(empty->has_value());

  CHECK(basic_authorization({"u", "p"}) == "Basic dTpw");
  CHECK(base64_decode("dTpw") == std::optional<std::string>("u:p"));
  CHECK(base64_decode("YQ") == std::optional<std::string>("a"));
  CHECK(base64_decode(base64_encode("ab")) == std::optional<std::string>("ab"));
}

namespace {

std::string manifest_json(int layers, const std::string& extra = "") {
  std::string ls;
  for (int i = 0; i < layers; ++i)
    ls += std::string(i ? "," : "") + R"({"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":")" +
          d64 + R"(","size":100})";
  return R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
    "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" + e64 +
         R"(","size":10},"layers":[)" + ls + "]" + extra + "}";
}

} // namespace

TEST_CASE("manifests: OCI and Docker, artifactType, subject, limits", "[registry]") {
  auto m = parse_manifest(manifest_json(3, R"(,"artifactType":"application/vnd.dsec.layer.v1",
    "subject":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" + d64 +
                                                R"(","size":5},"annotations":{"a":"b"})"),
                          "r/x:1");
  REQUIRE(m.ok());
  CHECK(m->layers.size() == 3);
  CHECK(m->config.digest == e64);
  CHECK(m->artifact_type == "application/vnd.dsec.layer.v1");
  REQUIRE(m->subject.has_value());
  CHECK(m->subject->digest == d64);
  CHECK(m->annotations.at("a") == "b");

  manifest_limits few;
  few.max_layers = 2;
  auto many = parse_manifest(manifest_json(3), "r/x:1", few);
  REQUIRE_FALSE(many.ok());
  CHECK(many.err().code == errc::too_large);
  CHECK(contains(many.err().message, "3 layers, more than the 2 allowed"));
  manifest_limits small;
  small.max_image_bytes = 250;
  auto big = parse_manifest(manifest_json(3), "r/x:1", small);
  REQUIRE_FALSE(big.ok());
  CHECK(big.err().code == errc::too_large);

  auto bad_digest = parse_manifest(R"({"schemaVersion":2,"config":{"digest":"sha256:1","size":1},"layers":[]})", "w");
  REQUIRE_FALSE(bad_digest.ok());
  CHECK(contains(bad_digest.err().message, "digest"));
  auto neg = parse_manifest(R"({"schemaVersion":2,"config":{"digest":")" + d64 + R"(","size":-1},"layers":[]})", "w");
  CHECK_FALSE(neg.ok());

  CHECK(*classify_manifest(oci_manifest_type, "", "w") == "manifest");
  CHECK(*classify_manifest(docker_manifest_type, "", "w") == "manifest");
  CHECK(*classify_manifest(docker_list_type, "", "w") == "index");
  CHECK(*classify_manifest("application/vnd.oci.image.index.v1+json; charset=utf-8", "", "w") == "index");
  CHECK(*classify_manifest("application/json", manifest_json(1), "w") == "manifest");
  CHECK(*classify_manifest("", R"({"schemaVersion":2,"manifests":[]})", "w") == "index");
  auto s1 = classify_manifest("application/vnd.docker.distribution.manifest.v1+prettyjws", "{}", "r/x:1");
  REQUIRE_FALSE(s1.ok());
  CHECK(contains(s1.err().message, "schema 1"));
  auto s1b = classify_manifest("application/json", R"({"schemaVersion":1,"fsLayers":[]})", "r/x:1");
  REQUIRE_FALSE(s1b.ok());
  CHECK(contains(s1b.err().message, "schema 1"));
  CHECK_FALSE(classify_manifest("text/html", "<html>", "w").ok());

  CHECK(is_layer_tar_type("application/vnd.docker.image.rootfs.diff.tar.gzip"));
  CHECK(is_layer_tar_type("application/vnd.oci.image.layer.v1.tar+zstd"));
  CHECK_FALSE(is_layer_tar_type("application/vnd.dsec.erofs.v1"));
}

TEST_CASE("indexes: linux/amd64 is picked, its absence lists the platforms", "[registry]") {
  auto entry = [](const std::string& digest, const std::string& os, const std::string& arch,
                  const std::string& variant = "") {
    return R"({"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" + digest +
           R"(","size":7,"platform":{"os":")" + os + R"(","architecture":")" + arch +
           R"(")" + (variant.empty() ? "" : R"(,"variant":")" + variant + "\"") + "}}";
  };
  auto idx = parse_index(R"({"schemaVersion":2,"manifests":[)" + entry(d64, "linux", "arm64", "v8") +
                             "," + entry(e64, "linux", "amd64") + "]}",
                         "r/x:1");
  REQUIRE(idx.ok());
  auto p = pick_platform(*idx, "r/x:1");
  REQUIRE(p.ok());
  CHECK(p->digest == e64);

  auto arm = parse_index(R"({"schemaVersion":2,"manifests":[)" + entry(d64, "linux", "arm64", "v8") +
                             "," + entry(e64, "linux", "s390x") + "]}",
                         "127.0.0.1:5000/multi:1");
  REQUIRE(arm.ok());
  auto none = pick_platform(*arm, "127.0.0.1:5000/multi:1");
  REQUIRE_FALSE(none.ok());
  CHECK(none.err().code == errc::not_found);
  CHECK(contains(none.err().message, "127.0.0.1:5000/multi:1"));
  CHECK(contains(none.err().message, "no linux/amd64"));
  CHECK(contains(none.err().message, "linux/arm64/v8, linux/s390x"));

  manifest_limits tiny;
  tiny.max_manifests = 1;
  CHECK(parse_index(R"({"schemaVersion":2,"manifests":[)" + entry(d64, "a", "b") + "," +
                        entry(e64, "c", "d") + "]}",
                    "w", tiny).err().code == errc::too_large);
}

TEST_CASE("image config: Env, WorkingDir and User become exec defaults", "[registry]") {
  auto c = parse_image_config(
      R"({"architecture":"amd64","config":{"Env":["PATH=/usr/bin:/bin","A=b=c","EMPTY="],
          "WorkingDir":"/app","User":"1000:1000"}})",
      "cfg");
  REQUIRE(c.ok());
  CHECK(c->env.at("PATH") == "/usr/bin:/bin");
  CHECK(c->env.at("A") == "b=c");
  CHECK(c->env.at("EMPTY").empty());
  CHECK(c->workdir == "/app");
  CHECK(c->user == "1000:1000");
  auto bare = parse_image_config(R"({"architecture":"amd64"})", "cfg");
  REQUIRE(bare.ok());
  CHECK(bare->env.empty());
  CHECK_FALSE(parse_image_config("nope", "cfg").ok());
}

TEST_CASE("registry options: --registry-mirror and insecure hosts", "[registry]") {
  registry_options o;
  REQUIRE(add_mirror_option(o, "docker.io=mirror.local:5000,m2.local").ok());
  REQUIRE(add_mirror_option(o, "docker.io=m3.local").ok());
  REQUIRE(add_mirror_option(o, "docker.io=m2.local").ok());  // no duplicate
  CHECK(o.mirrors.at("docker.io") ==
        std::vector<std::string>{"mirror.local:5000", "m2.local", "m3.local"});
  struct row { const char* in; const char* says; };
  const row bad[] = {
    {"docker.io", "expected REGISTRY=MIRROR"},
    {"=m", "registry \"\""},
    {"docker.io=", "names no mirror"},
    {"docker.io=https://m", "mirror \"https://m\""},
    {"docker.io=a,,b", "mirror \"\""},
    {"reg/x=m", "registry \"reg/x\""},
  };
  for (const auto& r : bad) {
    INFO(r.in);
    auto st = add_mirror_option(o, r.in);
    REQUIRE_FALSE(st.ok());
    CHECK(contains(st.err().message, r.says));
    CHECK(contains(st.err().message, "--registry-mirror"));
  }
  o.insecure_hosts = {"127.0.0.1:5000"};
  CHECK(is_insecure(o, "127.0.0.1:5000"));
  CHECK_FALSE(is_insecure(o, "127.0.0.1:5001"));
}

TEST_CASE("image pulls: the default layer ref", "[registry]") {
  auto r = parse_image_reference("127.0.0.1:5000/team/img:1");
  REQUIRE(r.ok());
  CHECK(image_layer_ref(*r, e64) == "img/127.0.0.1-5000/team/img@sha256-" + std::string(32, 'e'));
  auto hub = parse_image_reference("python:3.11");
  CHECK(image_layer_ref(*hub, d64) == "img/docker.io/library/python@sha256-" + std::string(32, 'a'));
  auto v6 = parse_image_reference("[::1]:5000/x");
  CHECK(image_layer_ref(*v6, d64).rfind("img/--1-5000/x@", 0) == 0);
  // A long repository keeps its tail; the ref stays a valid layer ref.
  auto longr = parse_image_reference("reg.io/" + std::string(100, 'a') + "/" + std::string(60, 'b'));
  REQUIRE(longr.ok());
  auto ref = image_layer_ref(*longr, d64);
  auto parsed = layers::parse_ref(ref);
  REQUIRE(parsed.ok());
  CHECK(parsed->name.size() <= 128);
  CHECK(parsed->name.find(std::string(60, 'b')) != std::string::npos);
}

TEST_CASE("storage locations: kept per registry and blob, for a while, until a read fails",
          "[registry]") {
  storage_locations locs;
  auto t0 = storage_locations::clock::now();
  CHECK_FALSE(locs.find("reg:5000", d64, t0));
  locs.remember("reg:5000", d64, "https://s3.example/b?X-Amz-Signature=1", t0);
  // The same blob through another registry (a mirror) has its own location.
  CHECK_FALSE(locs.find("mirror:5000", d64, t0));
  CHECK_FALSE(locs.find("reg:5000", e64, t0));
  auto got = locs.find("reg:5000", d64, t0 + std::chrono::seconds(30));
  REQUIRE(got);
  CHECK(*got == "https://s3.example/b?X-Amz-Signature=1");
  // Past its time the registry is asked again (a presigned URL expires).
  CHECK_FALSE(locs.find("reg:5000", d64, t0 + storage_locations::ttl));
  CHECK(locs.size() == 0);
  // A failed read forgets it at once.
  locs.remember("reg:5000", e64, "https://s3.example/e", t0);
  locs.forget("reg:5000", e64);
  CHECK_FALSE(locs.find("reg:5000", e64, t0));
}

TEST_CASE("storage locations: bounded; stale entries go first", "[registry]") {
  storage_locations locs;
  auto t0 = storage_locations::clock::now();
  auto digest = [](int i) { return "sha256:" + std::to_string(i); };
  for (int i = 0; i < 4095; ++i)
    locs.remember("reg", digest(i), "https://s/" + std::to_string(i), t0);
  auto later = t0 + storage_locations::ttl;
  locs.remember("reg", digest(5000), "https://s/new", later - std::chrono::seconds(1));
  CHECK(locs.size() == 4096);
  // Full: the stale ones are dropped, the fresh one stays.
  locs.remember("reg", digest(5001), "https://s/newer", later);
  CHECK(locs.size() == 2);
  CHECK(locs.find("reg", digest(5000), later - std::chrono::seconds(1)));
}
