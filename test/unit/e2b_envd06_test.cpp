// envd 0.6 (issue 27), the pure parts: metadata headers of an upload checked
// and lower-cased, gzip bodies inflated within the node's file limit,
// metadata in entries, write answers and watch events with their entry, and
// the text form set_metadata carries.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <nlohmann/json.hpp>

#include "api/e2b_codec.hpp"
#include "api/e2b_upload.hpp"
#include "core/fs_entry.hpp"

namespace dsec::e2b {

using nlohmann::json;

namespace {

std::string gzip_of(const std::string& data) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(compressBound(static_cast<uLong>(data.size())) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

} // namespace

TEST_CASE("e2b upload metadata headers are checked and lower-cased", "[unit][e2b]") {
  auto m = parse_metadata_headers({{"content-type", "application/octet-stream"},
                                   {"x-metadata-author", "Ada L."},
                                   {"x-metadata-purpose", ""}});
  REQUIRE(m);
  CHECK(*m == std::map<std::string, std::string>{{"author", "Ada L."}, {"purpose", ""}});
  CHECK(parse_metadata_headers({})->empty());
  struct bad {
    std::vector<std::pair<std::string, std::string>> headers;
    std::string named;
  };
  for (auto& b : std::vector<bad>{
         {{{"x-metadata-", "v"}}, "\"\""},
         {{{"x-metadata-a b", "v"}}, "a b"},
         {{{"x-metadata-k", "caf\xc3\xa9"}}, "k"},
         {{{"x-metadata-k", "line\n"}}, "k"},
         {{{"x-metadata-k", std::string(5000, 'v')}}, "over 4096"},
         {{{"x-metadata-k", "1"}, {"x-metadata-k", "2"}}, "twice"},
       }) {
    auto r = parse_metadata_headers(b.headers);
    REQUIRE_FALSE(r);
    CHECK(r.err().code == errc::invalid_argument);
    CHECK(r.err().message.find(b.named) != std::string::npos);
  }
  std::vector<std::pair<std::string, std::string>> many;
  for (int i = 0; i <= static_cast<int>(max_metadata_keys); ++i)
    many.push_back({"x-metadata-k" + std::to_string(i), "v"});
  CHECK_FALSE(parse_metadata_headers(many));
}

TEST_CASE("e2b upload bodies: identity as is, gzip inflated within the limit", "[unit][e2b]") {
  CHECK(*decode_upload_body("", "raw", 10) == "raw");
  CHECK(*decode_upload_body("identity", "raw", 10) == "raw");
  std::string text(100000, 'x');
  auto z = gzip_of(text);
  REQUIRE(z.size() < 1000);
  auto back = decode_upload_body("GZIP", z, 1 << 20);
  REQUIRE(back);
  CHECK(*back == text);
  // A small body that would inflate past the node's file limit.
  auto big = decode_upload_body("gzip", z, 50000);
  REQUIRE_FALSE(big);
  CHECK(big.err().code == errc::too_large);
  // Corrupt, truncated, empty, another encoding: refused by name.
  CHECK(decode_upload_body("gzip", "not gzip", 100).err().code == errc::invalid_argument);
  CHECK(decode_upload_body("gzip", z.substr(0, z.size() / 2), 1 << 20).err().message.find("gzip")
        != std::string::npos);
  CHECK_FALSE(decode_upload_body("gzip", "", 100));
  auto br = decode_upload_body("br", "x", 100);
  REQUIRE_FALSE(br);
  CHECK(br.err().message.find("\"br\"") != std::string::npos);
}

TEST_CASE("e2b entries, write answers and watch events carry metadata", "[unit][e2b]") {
  fs_entry e;
  e.name = "a.txt";
  e.path = "/home/user/a.txt";
  e.type = "file";
  e.size = 3;
  e.mode = 0100644;
  e.uid = 1000;
  owner_names names;
  names.users[1000] = "user";
  auto plain = json::parse(encode_entry(e, &names));
  CHECK(plain.find("metadata") == plain.end());
  e.metadata = {{"author", "ada"}};
  auto j = json::parse(encode_entry(e, &names));
  CHECK(j["metadata"] == json{{"author", "ada"}});
  CHECK(j["owner"] == "user");

  CHECK(json::parse(encode_written({"/a", "/b/c"}, {{"k", "v"}}))
        == json::parse(R"([{"name":"a","type":"file","path":"/a","metadata":{"k":"v"}},
                           {"name":"c","type":"file","path":"/b/c","metadata":{"k":"v"}}])"));
  CHECK(json::parse(encode_written({"/a"}, {}))
        == json::parse(R"([{"name":"a","type":"file","path":"/a"}])"));

  auto ev = json::parse(watch_event("a.txt", "EVENT_TYPE_WRITE", e, &names));
  CHECK(ev["filesystem"]["name"] == "a.txt");
  CHECK(ev["filesystem"]["type"] == "EVENT_TYPE_WRITE");
  CHECK(ev["filesystem"]["entry"]["path"] == "/home/user/a.txt");
  CHECK(ev["filesystem"]["entry"]["size"] == "3");
  CHECK(json::parse(watch_event("a.txt", "EVENT_TYPE_REMOVE"))["filesystem"].count("entry") == 0);
}

TEST_CASE("e2b watch requests: includeEntry and allowNetworkMounts", "[unit][e2b]") {
  auto w = parse_watch(R"({"path":"d","recursive":true,"includeEntry":true,
                           "allowNetworkMounts":true})", "/home/user");
  REQUIRE(w);
  CHECK(w->path == "/home/user/d");
  CHECK(w->depth > 1);
  CHECK(w->include_entry);
  auto plain = parse_watch(R"({"path":"/d"})");
  REQUIRE(plain);
  CHECK_FALSE(plain->include_entry);
  CHECK(plain->depth == 1);
}

TEST_CASE("set_metadata's text form round-trips what E2B allows", "[unit][e2b]") {
  std::map<std::string, std::string> m{{"a", "x=y"}, {"b-c", ""}, {"d", "with spaces"}};
  CHECK(parse_metadata_lines(metadata_lines(m)) == m);
  CHECK(parse_metadata_lines("").empty());
  CHECK(parse_metadata_lines("no-equals\n=v\n") .empty());
}

TEST_CASE("the claimed envd version is the one implemented", "[unit][e2b]") {
  CHECK(std::string{envd_version} == "0.6.4");
}

} // namespace dsec::e2b
