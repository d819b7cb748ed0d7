// Image import: parsing and verifying OCI layouts and `docker save` archives,
// then applying their layers into one staging tree and building one EROFS
// layer of it (see oci_import.hpp for why one per image).
#include "layers/oci_import.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "layers/digest.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::layers {

namespace {

using json = nlohmann::json;
using sys::unique_fd;

// Manifests, indexes and configs are small; a bigger "manifest" is garbage
// (or an attempt to make the importer allocate). Real ones are a few KiB;
// configs with long histories stay well under 1 MiB.
constexpr int64_t max_json_bytes = 16 << 20;

// Nested indexes deeper than this are a loop or garbage.
constexpr int max_index_depth = 4;

const char* const index_types[] = {
  "application/vnd.oci.image.index.v1+json",
  "application/vnd.docker.distribution.manifest.list.v2+json",
};
const char* const manifest_types[] = {
  "application/vnd.oci.image.manifest.v1+json",
  "application/vnd.docker.distribution.manifest.v2+json",
};
// Every layer type libarchive can read as a (compressed) tar.
const char* const layer_types[] = {
  "application/vnd.oci.image.layer.v1.tar",
  "application/vnd.oci.image.layer.v1.tar+gzip",
  "application/vnd.oci.image.layer.v1.tar+zstd",
  "application/vnd.oci.image.layer.nondistributable.v1.tar",
  "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
  "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
  "application/vnd.docker.image.rootfs.diff.tar",
  "application/vnd.docker.image.rootfs.diff.tar.gzip",
  "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
};

template <size_t N>
bool one_of(const std::string& s, const char* const (&list)[N]) {
  for (auto* x : list)
    if (s == x)
      return true;
  return false;
}

// A path named by a manifest, relative to the layout root: no "..", no
// absolute path (it is resolved in the root anyway; this gives a clear error).
status check_rel_path(const std::string& p, const std::string& where) {
  if (p.empty() || p[0] == '/' || p == ".." || p.compare(0, 3, "../") == 0
      || p.find("/../") != std::string::npos
      || (p.size() >= 3 && p.compare(p.size() - 3, 3, "/..") == 0))
    return invalid_argument(where + ": path \"" + p + "\" leaves the archive");
  return {};
}

// Opens `rel` below `dir`, resolved inside it, and checks it is a file.
expected<unique_fd> open_blob(const std::string& dir, const std::string& rel,
                              const std::string& what) {
  unique_fd root{::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
  if (!root)
    return sys_error("open image", dir, errno, errc::invalid_argument);
  unique_fd fd{sys::open_in_root(root.get(), rel, O_RDONLY)};
  if (!fd) {
    std::string why = errno == ENOENT ? " is missing" : std::string{": "} + std::strerror(errno);
    return invalid_argument(dir + ": " + what + " " + rel + why);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return invalid_argument(dir + ": " + what + " " + rel + " is not a regular file");
  return fd;
}

expected<std::string> read_fd(int fd, const std::string& shown) {
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return sys_error("stat", shown, errno);
  if (st.st_size > max_json_bytes)
    return invalid_argument(shown + " is " + std::to_string(st.st_size)
                            + " bytes, more than any manifest or config (16 MiB)");
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    auto n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return sys_error("read", shown, n < 0 ? errno : EIO);
    got += static_cast<size_t>(n);
  }
  return out;
}

expected<json> parse_json(const std::string& text, const std::string& shown) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(shown + " is not a JSON object");
  return j;
}

// A descriptor's fields, checked.
struct descriptor {
  std::string media_type, digest;
  int64_t size = -1;
};

expected<descriptor> parse_descriptor(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("digest") || !j["digest"].is_string())
    return invalid_argument(where + ": descriptor without a \"digest\" string");
  descriptor d;
  d.digest = j["digest"].get<std::string>();
  if (!is_valid_digest(d.digest))
    return invalid_argument(where + ": digest \"" + d.digest
                            + "\" is not sha256:<64 hex> (only sha256 is supported)");
  if (j.contains("mediaType") && j["mediaType"].is_string())
    d.media_type = j["mediaType"].get<std::string>();
  if (j.contains("size") && j["size"].is_number_integer())
    d.size = j["size"].get<int64_t>();
  return d;
}

std::string blob_rel(const std::string& digest) { return "blobs/sha256/" + digest_hex(digest); }

// Reads a JSON blob named by `d` and verifies size and digest.
expected<json> read_json_blob(const std::string& dir, const descriptor& d,
                              const std::string& what) {
  auto rel = blob_rel(d.digest);
  auto fd = open_blob(dir, rel, what + " blob");
  if (!fd)
    return fd.err();
  auto shown = dir + "/" + rel + " (" + what + ")";
  auto text = read_fd(fd->get(), shown);
  if (!text)
    return text.err();
  if (d.size >= 0 && static_cast<int64_t>(text->size()) != d.size)
    return invalid_argument("size mismatch: " + shown + " has " + std::to_string(text->size())
                            + " bytes, its descriptor says " + std::to_string(d.size));
  auto got = sha256_string(*text);
  if (got != d.digest)
    return invalid_argument("digest mismatch: " + shown + " is " + got + ", expected " + d.digest);
  return parse_json(*text, shown);
}

// Picks the manifest to use from an index's "manifests".
expected<descriptor> pick(const json& index, const std::string& shown) {
  if (!index.contains("manifests") || !index["manifests"].is_array()
      || index["manifests"].empty())
    return invalid_argument(shown + " lists no manifests");
  auto& list = index["manifests"];
  if (list.size() == 1)
    return parse_descriptor(list[0], shown);
  std::string seen;
  for (auto& m : list) {
    auto p = m.is_object() && m.contains("platform") ? m["platform"] : json{};
    auto os = p.is_object() ? p.value("os", "") : "";
    auto arch = p.is_object() ? p.value("architecture", "") : "";
    if (os == "linux" && arch == "amd64")
      return parse_descriptor(m, shown);
    seen += (seen.empty() ? "" : ", ") + (os.empty() && arch.empty() ? "?" : os + "/" + arch);
  }
  return not_found(shown + " lists " + std::to_string(list.size())
                   + " manifests and none is for linux/amd64 (found: " + seen + ")");
}

} // namespace

expected<image_manifest> read_oci_layout(const std::string& dir) {
  auto layout_fd = open_blob(dir, "oci-layout", "file");
  if (!layout_fd)
    return invalid_argument(dir + ": no oci-layout file (not an OCI image layout)");
  auto layout_text = read_fd(layout_fd->get(), dir + "/oci-layout");
  if (!layout_text)
    return layout_text.err();
  if (auto j = parse_json(*layout_text, dir + "/oci-layout"); !j)
    return j.err();
  auto index_fd = open_blob(dir, "index.json", "file");
  if (!index_fd)
    return invalid_argument(dir + ": no index.json (not an OCI image layout)");
  auto text = read_fd(index_fd->get(), dir + "/index.json");
  if (!text)
    return text.err();
  auto node = parse_json(*text, dir + "/index.json");
  if (!node)
    return node.err();
  std::string shown = dir + "/index.json";
  for (int depth = 0;; ++depth) {
    if (depth > max_index_depth)
      return invalid_argument(dir + ": image indexes nested deeper than "
                              + std::to_string(max_index_depth));
    auto d = pick(*node, shown);
    if (!d)
      return d.err();
    bool is_index = one_of(d->media_type, index_types);
    if (!is_index && !d->media_type.empty() && !one_of(d->media_type, manifest_types))
      return invalid_argument(shown + ": unsupported media type \"" + d->media_type
                              + "\" (expected an OCI/Docker image manifest or index)");
    node = read_json_blob(dir, *d, is_index ? "index" : "manifest");
    if (!node)
      return node.err();
    shown = dir + "/" + blob_rel(d->digest);
    if (is_index || (node->contains("manifests") && !node->contains("layers")))
      continue;
    image_manifest out;
    out.format = "oci-layout";
    out.source = "manifest " + d->digest;
    auto& m = *node;
    if (!m.contains("config"))
      return invalid_argument(shown + " (manifest): no \"config\" descriptor");
    auto cfg = parse_descriptor(m["config"], shown + " config");
    if (!cfg)
      return cfg.err();
    if (auto c = read_json_blob(dir, *cfg, "config"); !c)
      return c.err();
    if (!m.contains("layers") || !m["layers"].is_array())
      return invalid_argument(shown + " (manifest): no \"layers\" array");
    for (size_t i = 0; i < m["layers"].size(); ++i) {
      auto where = shown + " layer " + std::to_string(i);
      auto l = parse_descriptor(m["layers"][i], where);
      if (!l)
        return l.err();
      if (!one_of(l->media_type, layer_types))
        return invalid_argument(where + ": unsupported media type \"" + l->media_type
                                + "\" (expected a tar, tar+gzip or tar+zstd layer)");
      out.layers.push_back({blob_rel(l->digest), {l->digest}, l->media_type, l->size});
    }
    return out;
  }
}

expected<image_manifest> read_docker_manifest(const std::string& dir) {
  auto fd = open_blob(dir, "manifest.json", "file");
  if (!fd)
    return invalid_argument(dir + ": no manifest.json (not a `docker save` archive)");
  auto shown = dir + "/manifest.json";
  auto text = read_fd(fd->get(), shown);
  if (!text)
    return text.err();
  auto list = json::parse(*text, nullptr, false);
  if (list.is_discarded() || !list.is_array())
    return invalid_argument(shown + " is not a JSON array");
  if (list.size() != 1)
    return invalid_argument(shown + " describes " + std::to_string(list.size())
                            + " images; import needs exactly one (docker save ONE image)");
  auto& m = list[0];
  if (!m.is_object() || !m.contains("Config") || !m["Config"].is_string() || !m.contains("Layers")
      || !m["Layers"].is_array())
    return invalid_argument(shown + ": the entry lacks \"Config\" or \"Layers\"");
  // The digest a file's name promises: "blobs/sha256/<hex>", "<hex>.json" or
  // "<hex>/layer.tar"; empty when the name promises nothing.
  auto named_digest = [](std::string p) -> std::string {
    for (std::string suffix : {".json", "/layer.tar"})
      if (p.size() > suffix.size()
          && p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0)
        p.resize(p.size() - suffix.size());
    auto slash = p.rfind('/');
    auto d = "sha256:" + p.substr(slash == std::string::npos ? 0 : slash + 1);
    return is_valid_digest(d) ? d : std::string{};
  };
  auto cfg_rel = m["Config"].get<std::string>();
  if (auto st = check_rel_path(cfg_rel, shown); !st)
    return st.err();
  auto cfg_fd = open_blob(dir, cfg_rel, "config");
  if (!cfg_fd)
    return cfg_fd.err();
  auto cfg_text = read_fd(cfg_fd->get(), dir + "/" + cfg_rel);
  if (!cfg_text)
    return cfg_text.err();
  if (auto want = named_digest(cfg_rel); !want.empty() && sha256_string(*cfg_text) != want)
    return invalid_argument("digest mismatch: config " + dir + "/" + cfg_rel + " is "
                            + sha256_string(*cfg_text) + ", its name says " + want);
  auto cfg = parse_json(*cfg_text, dir + "/" + cfg_rel);
  if (!cfg)
    return cfg.err();
  json diff_ids = json::array();
  if (cfg->contains("rootfs") && (*cfg)["rootfs"].is_object())
    diff_ids = (*cfg)["rootfs"].value("diff_ids", json::array());
  image_manifest out;
  out.format = "docker-archive";
  out.source = "manifest.json";
  auto& layers = m["Layers"];
  for (size_t i = 0; i < layers.size(); ++i) {
    auto where = shown + " layer " + std::to_string(i);
    if (!layers[i].is_string())
      return invalid_argument(where + ": not a path string");
    auto rel = layers[i].get<std::string>();
    if (auto st = check_rel_path(rel, where); !st)
      return st.err();
    image_layer l{rel, {}, "", -1};
    // docker save writes uncompressed layers: their digest is the diff_id.
    if (diff_ids.is_array() && i < diff_ids.size() && diff_ids[i].is_string()
        && is_valid_digest(diff_ids[i].get<std::string>()))
      l.digests.push_back(diff_ids[i].get<std::string>());
    if (auto d = named_digest(rel); !d.empty())
      l.digests.push_back(d);
    if (l.digests.empty())
      return invalid_argument(where + " (" + rel + "): cannot be verified: no diff_id in the "
                              "config and no digest in its name");
    out.layers.push_back(std::move(l));
  }
  return out;
}

namespace {

// Opens, size-checks and digests one layer blob; returns the open fd so the
// apply reads the very file that was verified.
expected<unique_fd> verified_layer(const std::string& dir, const image_layer& l,
                                   const std::string& what) {
  auto fd = open_blob(dir, l.path, what + " blob");
  if (!fd)
    return fd.err();
  struct stat st;
  if (::fstat(fd->get(), &st) == 0 && l.size >= 0 && st.st_size != l.size)
    return invalid_argument("size mismatch: " + dir + "/" + l.path + " has "
                            + std::to_string(st.st_size) + " bytes, the manifest says "
                            + std::to_string(l.size));
  auto got = sha256_file("/proc/self/fd/" + std::to_string(fd->get()));
  if (!got)
    return got.err();
  for (auto& want : l.digests)
    if (*got == want)
      return fd;
  return invalid_argument("digest mismatch: " + what + " " + dir + "/" + l.path + " is " + *got
                          + ", expected " + l.digests.front());
}

} // namespace

expected<import_result> import_image(store& s, const std::string& input, const std::string& name,
                                     const std::string& version, const std::string& kind) {
  return import_image(s, input, name, version, kind, store::build_options{});
}

namespace {

/// Verifies and applies `manifest`'s layers (in `dir`) onto `rootfs`, then
/// builds the layer.
expected<import_result> apply_and_build(store& s, const std::string& dir,
                                        const image_manifest& manifest, const std::string& rootfs,
                                        const std::string& what, const std::string& name,
                                        const std::string& version, const std::string& kind,
                                        const store::build_options& opts) {
  import_result out;
  if (manifest.layers.empty())
    return invalid_argument(what + ": the image has no layers");
  out.manifest = manifest;
  auto n = out.manifest.layers.size();
  for (size_t i = 0; i < n; ++i) {
    auto& l = out.manifest.layers[i];
    auto which = "layer " + std::to_string(i + 1) + "/" + std::to_string(n);
    auto lname = which + " (" + l.path + ")";
    auto fd = verified_layer(dir, l, which);
    if (!fd)
      return error{fd.err().code, what + ": " + fd.err().message};
    auto a = apply_tar("/proc/self/fd/" + std::to_string(fd->get()), rootfs, lname, out.stats);
    if (!a)
      return error{a.err().code, what + ": " + a.err().message};
  }
  auto info = s.build(rootfs, name, version, kind, opts);
  if (!info)
    return info.err();
  out.info = *info;
  return out;
}

/// A staging dir <store>/tmp/<prefix>-XXXXXX with an empty rootfs/ in it.
status make_staging(store& s, const std::string& prefix, const std::string& what,
                    sys::scoped_tree& staging) {
  std::string tmpl = s.root() + "/tmp/" + prefix + "-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return sys_error(what + ": create staging dir", tmpl, errno);
  staging.path = tmpl;
  auto rootfs = staging.path + "/rootfs";
  if (::mkdir(rootfs.c_str(), 0755) != 0)
    return sys_error(what + ": mkdir", rootfs, errno);
  return {};
}

} // namespace

expected<import_result> import_layers(store& s, const std::string& dir,
                                      const image_manifest& manifest, const std::string& name,
                                      const std::string& version, const std::string& kind,
                                      const store::build_options& opts) {
  for (auto st : {validate_name(name), validate_version(version), validate_kind(kind)})
    if (!st)
      return st.err();
  auto what = "import " + manifest.source + " as " + name + "@" + version;
  sys::scoped_tree staging;
  if (auto st = make_staging(s, "apply", what, staging); !st)
    return st.err();
  return apply_and_build(s, dir, manifest, staging.path + "/rootfs", what, name, version, kind,
                         opts);
}

expected<import_result> import_image(store& s, const std::string& input, const std::string& name,
                                     const std::string& version, const std::string& kind,
                                     const store::build_options& opts) {
  for (auto st : {validate_name(name), validate_version(version), validate_kind(kind)})
    if (!st)
      return st.err();
  auto what = "import " + input + " as " + name + "@" + version;
  struct stat st;
  if (::stat(input.c_str(), &st) != 0)
    return sys_error(what + ": stat", input, errno,
                     errno == ENOENT ? errc::not_found : errc::invalid_argument);
  sys::scoped_tree staging; // under <store>/tmp, removed whatever happens
  std::string tmpl = s.root() + "/tmp/import-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return sys_error(what + ": create staging dir", tmpl, errno);
  staging.path = tmpl;
  auto rootfs = staging.path + "/rootfs";
  if (::mkdir(rootfs.c_str(), 0755) != 0)
    return sys_error(what + ": mkdir", rootfs, errno);

  std::string dir = input;
  if (S_ISREG(st.st_mode)) {
    // A docker save (or a tarred OCI layout): unpack it, as plain files,
    // confined to the staging dir; then it is a directory like any other.
    dir = staging.path + "/archive";
    if (::mkdir(dir.c_str(), 0700) != 0)
      return sys_error(what + ": mkdir", dir, errno);
    apply_stats unpacked;
    apply_options plain;
    plain.whiteouts = false;
    plain.keep_owner = false;
    if (auto a = apply_tar(input, dir, "archive " + input, unpacked, plain); !a)
      return error{a.err().code, what + ": " + a.err().message};
  } else if (!S_ISDIR(st.st_mode)) {
    return invalid_argument(what + ": " + input
                            + " is neither an OCI layout directory nor a docker save .tar");
  }
  // docker save archives (even docker 25+ ones that also carry index.json)
  // are read through manifest.json; a directory is an OCI layout unless it
  // only has manifest.json (an unpacked docker save).
  auto has = [&](const char* f) { return sys::exists(dir + "/" + f); };
  bool docker = has("manifest.json") && (S_ISREG(st.st_mode) || !has("index.json"));
  auto manifest = docker ? read_docker_manifest(dir) : read_oci_layout(dir);
  if (!manifest)
    return error{manifest.err().code, what + ": " + manifest.err().message};
  return apply_and_build(s, dir, *manifest, rootfs, what, name, version, kind, opts);
}

bool is_layer_tar_media_type(std::string_view media_type) {
  return one_of(std::string(media_type), layer_types);
}

} // namespace dsec::layers
