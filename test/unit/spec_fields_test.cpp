// The one field list (core/spec_fields.hpp): same_request() tells specs apart
// by every field of it, the JSON codecs carry every field they show, and
// every bound it declares is enforced, by validate() and the JSON parser,
// with the message declared beside it.
#include <catch2/catch.hpp>

#include "core/json_codec.hpp"
#include "core/spec_fields.hpp"
#include "core/validate.hpp"
#include "full_spec.hpp"

using namespace dsec;
namespace codec = dsec::json_codec;

namespace {

// Another value of the same type.
void change(std::string& s) { s += "x"; }
void change(int64_t& n) { n += 1; }
void change(double& d) { d += 0.5; }
void change(bool& b) { b = !b; }
void change(std::vector<std::string>& v) { v.push_back("x"); }
void change(std::map<std::string, std::string>& m) { m["x"] = "y"; }
void change(sandbox_state& s) {
  s = s == sandbox_state::running ? sandbox_state::paused : sandbox_state::running;
}

/// Calls `f(name, member)` for each field of `x`, nested lists flattened.
template <class T, class F>
void for_each_leaf(T& x, F&& f) {
  for_each_field<T>([&](const auto& fd) {
    if constexpr (has_field_list_v<typename std::decay_t<decltype(fd)>::type>)
      for_each_leaf(x.*(fd.member), f);
    else
      f(fd.name, x.*(fd.member));
  });
}

} // namespace

TEST_CASE("same_request tells specs apart by each field of the list", "[fields]") {
  sandbox_spec base;
  base.layers = {"base/busybox@1"};
  CHECK(same_request(base, base));
  size_t leaves = 0;
  for_each_leaf(base, [&](const char*, auto&) { ++leaves; });
  CHECK(leaves >= 16);
  for (size_t i = 0; i < leaves; ++i) {
    auto other = base;
    size_t k = 0;
    std::string changed;
    for_each_leaf(other, [&](const char* name, auto& v) {
      if (k++ == i) {
        change(v);
        changed = name;
      }
    });
    INFO("changed " << changed);
    CHECK_FALSE(same_request(base, other));
  }
}

TEST_CASE("a spec with no default field survives encode and parse", "[fields]") {
  // full_spec() leaves these at their defaults.
  auto s = test::full_spec();
  s.backend = "microvm";
  s.network.allow = {"pypi.org:443"};
  s.paused_ttl_s = 600;
  auto back = codec::parse_spec(codec::encode(s));
  REQUIRE(back.ok());
  CHECK(same_request(s, *back));
  // A record's spec, read back leniently, too.
  codec::sandbox_record rec{"n-1.abc", s, 1700000000123, 0, {"sha256:a", "sha256:b"}, ""};
  auto r = codec::decode_record(codec::encode(rec));
  REQUIRE(r.ok());
  CHECK(same_request(s, r->spec));
  // The image, which only the container backend takes.
  auto img = test::full_spec();
  img.image = "127.0.0.1:5000/team/py:3.11";
  back = codec::parse_spec(codec::encode(img));
  REQUIRE(back.ok());
  CHECK(same_request(img, *back));
}

TEST_CASE("a sandbox info's shown fields survive encode and decode", "[fields]") {
  sandbox_info s;
  for_each_leaf(s, [](const char*, auto& v) { change(v); });
  s.created_at_ms = 1700000000123;
  s.expires_at_ms = 1700000900123;
  s.paused_expires_at_ms = 1700000500123;
  auto back = codec::decode_sandbox(codec::encode(s));
  REQUIRE(back.ok());
  for_each_field<sandbox_info>([&](const auto& fd) {
    if constexpr (std::decay_t<decltype(fd)>::form != shown::internal) {
      INFO("field " << fd.name);
      sandbox_info a, b;
      a.*(fd.member) = s.*(fd.member);
      b.*(fd.member) = (*back).*(fd.member);
      CHECK(equal_fields(a, b));
    }
  });
}

namespace {

/// Calls `f(path, member, bound)` for each bounded field of `x`, nested
/// lists flattened and named "parent.field".
template <class T, class F>
void for_each_bound(T& x, const std::string& prefix, F&& f) {
  for_each_field<T>([&](const auto& fd) {
    using M = typename std::decay_t<decltype(fd)>::type;
    if constexpr (has_field_list_v<M>)
      for_each_bound(x.*(fd.member), prefix + fd.name + ".", f);
    else if (fd.limits.message != nullptr)
      f(prefix + fd.name, x.*(fd.member), fd.limits);
  });
}

/// A list entry each list field accepts.
std::string sample_entry(const std::string& path) {
  if (path == "layers")
    return "a@1";
  if (path == "network.allow")
    return "10.0.0.1:80";
  return "/opt"; // protect.*
}

// Sets `v` to `n` (a number) or to `n` items (a list or map).
void set_to(double& v, double n) { v = n; }
void set_to(int64_t& v, double n) { v = static_cast<int64_t>(n); }
void set_to(bool& v, double n) { v = n != 0; } // never bounded; never called
void set_to(std::vector<std::string>& v, double n, const std::string& path) {
  v.assign(static_cast<size_t>(n), sample_entry(path));
}
// Strings have no bound (spec_limits::max_string holds them all); never called.
void set_to(std::string&, double, const std::string&) {}
void set_to(std::map<std::string, std::string>& m, double n, const std::string&) {
  m.clear();
  for (size_t i = 0; i < static_cast<size_t>(n); ++i)
    m["K" + std::to_string(i)] = "v";
}

} // namespace

TEST_CASE("each bound of the field list is enforced with its message", "[fields][limits]") {
  sandbox_spec base;
  base.layers = {"base/busybox@1"};
  REQUIRE(validate(base));
  size_t bounds = 0;
  for_each_bound(base, "", [&](const std::string& path, auto& member, const range& r) {
    using M = std::decay_t<decltype(member)>;
    ++bounds;
    INFO("field " << path << " bound " << r.lo << ".." << r.hi);
    const std::string want = path + ": " + r.message;
    // Offsets of the same field in a copy of base.
    auto offset = reinterpret_cast<const char*>(&member) - reinterpret_cast<const char*>(&base);
    auto field_of = [&](sandbox_spec& s) -> M& {
      return *reinterpret_cast<M*>(reinterpret_cast<char*>(&s) + offset);
    };
    if constexpr (std::is_arithmetic_v<M>) {
      // The bounds themselves pass; one past either end fails, in validate
      // and in the JSON parser, with the declared message.
      for (double ok : {r.lo, r.hi}) {
        auto s = base;
        set_to(field_of(s), ok);
        CHECK(validate(s));
      }
      for (double bad : {r.lo - 1, r.hi + 1}) {
        auto s = base;
        set_to(field_of(s), bad);
        auto st = validate(s);
        REQUIRE_FALSE(st);
        CHECK(st.err().code == errc::invalid_argument);
        CHECK(st.err().message == want);
        auto parsed = codec::parse_spec(codec::encode(s));
        REQUIRE_FALSE(parsed.ok());
        CHECK(parsed.err().code == errc::invalid_argument);
        CHECK(parsed.err().message.rfind(want + ", got ", 0) == 0);
      }
    } else {
      auto s = base;
      set_to(field_of(s), r.hi + 1, path);
      auto st = validate(s);
      REQUIRE_FALSE(st);
      CHECK(st.err().code == errc::too_large);
      CHECK(st.err().message == want);
      auto parsed = codec::parse_spec(codec::encode(s));
      REQUIRE_FALSE(parsed.ok());
      CHECK(parsed.err().code == errc::too_large);
      CHECK(parsed.err().message == want);
      // At the bound the count is not what fails (network.allow then meets
      // the kernel's 128, core/allow_list.hpp).
      set_to(field_of(s), r.hi, path);
      auto at = validate(s);
      CHECK((at || at.err().message != want));
    }
  });
  // cpu, memory_mb, disk_mb, pids, ttl_s, paused_ttl_s, idle_timeout_s;
  // layers, env, labels, network.allow, network.deny, protect.readonly,
  // protect.hidden.
  CHECK(bounds == 14);
}

TEST_CASE("network.allow: 256 is the field list's bound, 128 the kernel's", "[fields][limits]") {
  CHECK(bound_of<network_policy>("allow").hi == 256);
  sandbox_spec s;
  s.layers = {"a@1"};
  s.network.allow.assign(129, "10.0.0.1:80");
  auto st = validate(s);
  REQUIRE_FALSE(st);
  CHECK(st.err().code == errc::invalid_argument);
  CHECK(st.err().message == "network.allow: at most 128 entries, got 129");
  // PUT .../network takes the same bound and message.
  std::string body = R"({"allow":[)";
  for (int i = 0; i < 257; ++i)
    body += std::string(i ? "," : "") + "\"10.0.0.1:80\"";
  auto put = codec::parse_network_policy(body + "]}");
  REQUIRE_FALSE(put.ok());
  CHECK(put.err().code == errc::too_large);
  CHECK(put.err().message == "network.allow: more than 256 entries");
}
