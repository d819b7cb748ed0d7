// Table tests of the layer ref grammar (core/layer_ref.hpp) and of the
// gateway's check that uses it (validate(sandbox_spec) on `layers`): every
// accepted form, every refused form with the rule it names, and the exact
// message the gateway answers for a ref the store would refuse.
#include <catch2/catch.hpp>

#include <string>

#include "core/layer_ref.hpp"
#include "core/validate.hpp"

using namespace dsec;

namespace {

sandbox_spec spec_with(std::string ref) {
  sandbox_spec s;
  s.layers = {std::move(ref)};
  return s;
}

} // namespace

TEST_CASE("layer refs: every accepted form", "[layer_ref]") {
  struct row { const char* in; const char* name; const char* version; };
  const row rows[] = {
    {"base/python@3.11", "base/python", "3.11"},
    {"a@1", "a", "1"},
    {"0a@B", "0a", "B"},
    {"ws/django-15202@1", "ws/django-15202", "1"},
    {"x.y_z/w-v@v2-rc.1_A", "x.y_z/w-v", "v2-rc.1_A"},
    {"snap/s1@1733100000000", "snap/s1", "1733100000000"},
  };
  for (const auto& r : rows) {
    INFO(r.in);
    auto p = layers::parse_ref(r.in);
    REQUIRE(p);
    CHECK(p->name == r.name);
    CHECK(p->version == r.version);
    CHECK(valid_layer_ref(r.in));
    CHECK(validate(spec_with(r.in)));
  }
  // The longest name and version.
  std::string longest = std::string(128, 'a') + "@" + std::string(64, '1');
  CHECK(layers::parse_ref(longest));
  CHECK(valid_layer_ref(longest));
}

TEST_CASE("layer refs: every refused form names the rule", "[layer_ref]") {
  struct row { const char* in; const char* why; };
  const row rows[] = {
    {"", "expected name@version"},
    {"base/python", "expected name@version"},
    {"@1", "layer name \"\": must not be empty"},
    {"base/python@", "layer version \"\": must not be empty"},
    {"Base@1", "layer name \"Base\": must start with a lower-case letter or digit"},
    {"-a@1", "layer name \"-a\": must start with a lower-case letter or digit"},
    {"/a@1", "layer name \"/a\": must start with a lower-case letter or digit"},
    {"aB@1", "layer name \"aB\": only a-z, 0-9, '.', '_', '-' and '/' are allowed"},
    {"a b@1", "layer name \"a b\": only a-z, 0-9, '.', '_', '-' and '/' are allowed"},
    {"a/@1", "layer name \"a/\": must not end with '/'"},
    {"a/../b@1", "layer name \"a/../b\": must not contain \"..\""},
    {"a//b@1", "layer name \"a//b\": must not contain \"//\""},
    {"a@b@c", "layer name \"a@b\": only a-z, 0-9, '.', '_', '-' and '/' are allowed"},
    {"a@1 2", "layer version \"1 2\": only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"},
    {"a@1/2", "layer version \"1/2\": only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"},
    {"a@1\"", "layer version \"1\"\": only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"},
  };
  for (const auto& r : rows) {
    INFO(r.in);
    auto p = layers::parse_ref(r.in);
    REQUIRE_FALSE(p);
    CHECK(p.err().code == errc::invalid_argument);
    CHECK(p.err().message == std::string{"layer ref \""} + r.in + "\": " + r.why);
    CHECK_FALSE(valid_layer_ref(r.in));
    auto st = validate(spec_with(r.in));
    REQUIRE_FALSE(st);
    CHECK(st.err().code == errc::invalid_argument);
    CHECK(st.err().message == std::string{"layers: \""} + r.in + "\" is not a name@version ref");
  }
  std::string long_name = std::string(129, 'a') + "@1";
  CHECK(layers::parse_ref(long_name).err().message
        == "layer ref \"" + long_name + "\": layer name \"" + std::string(129, 'a')
             + "\": longer than 128 characters");
  std::string long_version = "a@" + std::string(65, '1');
  CHECK(layers::parse_ref(long_version).err().message
        == "layer ref \"" + long_version + "\": layer version \"" + std::string(65, '1')
             + "\": longer than 64 characters");
  CHECK_FALSE(valid_layer_ref(long_version));
}
