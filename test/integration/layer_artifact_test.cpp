// Layers as OCI artifacts against a real registry (Debian's docker-registry,
// CNCF distribution 2.8, started here on loopback over plain HTTP):
//   - push_layer of a chunked layer: an OCI artifact with the metadata
//     image, the data blob and its chunk digest list;
//   - no conversion published: not_found;
//   - publish_conversion under a source image, fetch_conversion whole into
//     one store (same digest, the data blob verified) and lazily into
//     another: only the metadata image and the chunk list come, the data
//     blob is registered, and the lazy read path (blob_fs over the registry
//     fetcher, no kernel needed) reads the right bytes with one range
//     request, a small share of the blob.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "layers/blob_device.hpp"
#include "layers/digest.hpp"
#include "layers/store.hpp"
#include "lazyfs/blob_fs.hpp"
#include "lazyfs/registry_fetcher.hpp"
#include "registry/chunk_list.hpp"
#include "registry/layer_artifact.hpp"
#include "registry/lazy_source.hpp"
#include "registry/registry_client.hpp"
#include "sys/fs.hpp"

using namespace dsec;
using namespace std::chrono_literals;

namespace {

int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(s);
  return ntohs(a.sin_port);
}

bool port_open(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

/// A docker-registry on 127.0.0.1:<port>, plain HTTP, stopped at scope exit.
struct local_registry {
  std::string dir;
  int port = 0;
  pid_t pid = -1;
  explicit local_registry(const std::string& d) : dir(d), port(free_port()) {
    REQUIRE(sys::make_dirs(dir + "/data"));
    REQUIRE(sys::write_file_atomic(dir + "/config.yml",
                                   "version: 0.1\nlog: {level: warn}\nstorage: {filesystem: "
                                   "{rootdirectory: " + dir + "/data}}\nhttp: {addr: 127.0.0.1:"
                                     + std::to_string(port) + "}\n"));
    pid = ::fork();
    if (pid == 0) {
      int log = ::open((dir + "/log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      ::dup2(log, 1);
      ::dup2(log, 2);
      ::execl("/usr/bin/docker-registry", "docker-registry", "serve",
              (dir + "/config.yml").c_str(), nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 300 && !port_open(port); ++i)
      std::this_thread::sleep_for(20ms);
    REQUIRE(port_open(port));
  }
  ~local_registry() {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
  }
  std::string host() const { return "127.0.0.1:" + std::to_string(port); }
};

struct fixture {
  std::string path;
  fixture() {
    if (!sys::exists("/usr/bin/docker-registry"))
      FAIL("layer artifact tests need /usr/bin/docker-registry (scripts/deps.sh installs it)");
    std::string tmpl = "/tmp/dsec-artifact-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~fixture() { (void)sys::remove_tree(path); }
};

/// A chunked workspace layer of `files` files of 256 KiB random bytes and a
/// marker file.
layer_info build_layer(layers::store& st, const std::string& src, int files) {
  REQUIRE(sys::make_dirs(src + "/data"));
  std::mt19937 rng{7};
  for (int i = 0; i < files; ++i) {
    std::string bytes(256 << 10, '\0');
    for (auto& c : bytes)
      c = char(rng());
    REQUIRE(sys::write_file_atomic(src + "/data/f" + std::to_string(i), bytes));
  }
  REQUIRE(sys::write_file_atomic(src + "/marker", "pushed and pulled\n"));
  layers::store::build_options bo;
  bo.chunked = true;
  bo.config.env["LANG"] = "C.UTF-8";
  bo.config.workdir = "/data";
  auto info = st.build(src, "test/artifact", "1", "workspace", bo);
  if (!info)
    FAIL(info.err().message);
  return *info;
}

} // namespace

TEST_CASE("a published conversion is fetched lazily: metadata only, data by range requests",
          "[layer_artifact]") {
  fixture fx;
  local_registry reg{fx.path + "/registry"};
  registry::registry_options opts;
  opts.insecure_hosts = {reg.host()};
  auto client = registry::registry_client::open(reg.host(), opts);
  REQUIRE(client);
  // A "source image": any manifest in the repository will do as a subject.
  std::string config = "{}";
  auto config_digest = layers::sha256_string(config);
  REQUIRE((*client)->push_blob("team/img", config_digest, config));
  std::string image_manifest =
    R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
    R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")"
    + config_digest + R"(","size":2},"layers":[]})";
  auto source_digest = (*client)->put_manifest("team/img", "1",
                                               "application/vnd.oci.image.manifest.v1+json",
                                               image_manifest);
  REQUIRE(source_digest);
  auto source = registry::parse_image_reference(reg.host() + "/team/img:1");
  REQUIRE(source);

  auto src = layers::store::open(fx.path + "/src-store");
  REQUIRE(src);
  auto info = build_layer(*src, fx.path + "/tree", 24);
  auto target = registry::parse_image_reference(reg.host() + "/team/layer:v1");
  REQUIRE(target);
  auto pushed = registry::push_layer(*src, info.ref, *target, opts);
  if (!pushed)
    FAIL(pushed.err().message);
  CHECK(layers::is_valid_digest(*pushed));
  REQUIRE(registry::push_layer(*src, info.ref, *target, opts)); // blobs there: skipped
  auto manifest = (*client)->get_manifest("team/layer", "v1");
  REQUIRE(manifest);
  CHECK(manifest->body.find(registry::layer_artifact_type) != std::string::npos);
  CHECK(manifest->body.find(registry::chunk_list_media_type) != std::string::npos);
  CHECK(registry::push_layer(*src, "no/such@1", *target, opts).err().code == errc::not_found);

  auto lazy_store = layers::store::open(fx.path + "/lazy-store");
  REQUIRE(lazy_store);
  auto none = registry::fetch_conversion(*lazy_store, *source, *source_digest, opts, true);
  REQUIRE_FALSE(none);
  CHECK(none.err().code == errc::not_found);

  auto published = registry::publish_conversion(*src, info, *source, *source_digest, opts);
  if (!published)
    FAIL(published.err().message);
  CHECK((*client)->head_manifest("team/img", registry::conversion_tag(*source_digest)));

  // Whole: the same layer, its data blob downloaded and verified.
  auto whole_store = layers::store::open(fx.path + "/whole-store");
  REQUIRE(whole_store);
  auto back = registry::fetch_conversion(*whole_store, *source, *source_digest, opts, false);
  if (!back)
    FAIL(back.err().message);
  CHECK(back->digest == info.digest);
  CHECK(back->ref == info.ref);
  CHECK(back->kind == "workspace");
  // Exec defaults travel in the artifact's config as the store records them.
  auto recorded = src->resolve(info.ref);
  REQUIRE(recorded);
  CHECK(back->config.env == recorded->config.env);
  CHECK(back->config.workdir == recorded->config.workdir);
  {
    auto r = layers::read_data_blob_ref(whole_store->blob_path(back->digest));
    REQUIRE(r);
    auto data = layers::data_blob_path(whole_store->blob_path(back->digest), r->digest);
    struct stat sb;
    REQUIRE(::lstat(data.c_str(), &sb) == 0);
    CHECK(S_ISREG(sb.st_mode));
    CHECK(*layers::sha256_file(data) == r->digest);
    CHECK(sys::dir_is_empty(fx.path + "/whole-store/tmp"));
  }

  auto got = registry::fetch_conversion(*lazy_store, *source, *source_digest, opts, true);
  if (!got)
    FAIL(got.err().message);
  CHECK(got->digest == info.digest);
  auto ref = layers::read_data_blob_ref(lazy_store->blob_path(got->digest));
  REQUIRE(ref);
  // The data blob is a link into the daemon's mount and a registered source.
  auto link = layers::data_blob_path(lazy_store->blob_path(got->digest), ref->digest);
  struct stat sb;
  REQUIRE(::lstat(link.c_str(), &sb) == 0);
  CHECK(S_ISLNK(sb.st_mode));
  auto bs = registry::read_blob_source(lazy_store->root(), ref->digest);
  REQUIRE(bs);
  CHECK(bs->registry == reg.host());
  CHECK(bs->repository == "team/img");
  CHECK(bs->chunk_size == registry::default_chunk_size);
  REQUIRE(registry::load_chunk_list(lazy_store->root(), ref->digest));

  // The lazy read path over the registry: the right bytes, a small share.
  auto original = layers::data_blob_path(src->blob_path(info.digest), ref->digest);
  auto whole = sys::read_file(original);
  REQUIRE(whole);
  auto cache = lazyfs::chunk_cache::open(fx.path + "/cache", 64 << 20);
  REQUIRE(cache);
  lazyfs::blob_fs fs{lazy_store->root(), std::shared_ptr<lazyfs::chunk_cache>(std::move(*cache)),
                     std::make_shared<lazyfs::registry_fetcher>(opts)};
  auto hex = layers::digest_hex(ref->digest);
  std::string out(10000, '\0');
  uint64_t at = whole->size() / 2 + 1234;
  auto n = fs.read(hex, at, out.size(), out.data());
  if (!n)
    FAIL(n.err().message);
  CHECK(*n == out.size());
  CHECK(out == whole->substr(at, out.size()));
  auto k = fs.cache()->counters();
  CHECK(k.chunks_fetched == 1);
  CHECK(k.bytes_fetched < whole->size() / 10);
  CHECK(k.verify_failures == 0);
}
