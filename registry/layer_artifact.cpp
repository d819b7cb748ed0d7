// Layers as OCI artifacts (see layer_artifact.hpp): push any layer, publish
// a conversion under the source image's repository, fetch one back (its
// metadata image verified and stored, its data blob registered for lazy
// reads or downloaded whole).
#include "registry/layer_artifact.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/layer_ref.hpp"
#include "layers/blob_device.hpp"
#include "layers/digest.hpp"
#include "layers/store.hpp"
#include "registry/blob_extents.hpp"
#include "registry/chunk_list.hpp"
#include "registry/lazy_source.hpp"
#include "registry/manifest.hpp"
#include "registry/registry_client.hpp"
#include "sys/fs.hpp"

namespace dsec::registry {

namespace {

using json = nlohmann::json;

/// Bound on a layer artifact's config blob (a few hundred bytes in practice).
constexpr size_t max_config_bytes = 1u << 20;
/// Bound on a chunk list: 32 bytes per chunk, 64 MiB covers a 512 GiB blob
/// at 256 KiB chunks.
constexpr size_t max_chunk_list_bytes = 64u << 20;

json descriptor_json(const char* media_type, const std::string& digest, uint64_t size) {
  return {{"mediaType", media_type}, {"digest", digest}, {"size", size}};
}

std::string config_json(const layer_info& info) {
  json env = json::object();
  for (auto& [k, v] : info.config.env)
    env[k] = v;
  json j = {{"name", info.name},     {"version", info.version},   {"kind", info.kind},
            {"digest", info.digest}, {"size", info.size_bytes},
            {"config", {{"env", env}, {"workdir", info.config.workdir}, {"user", info.config.user}}}};
  return j.dump();
}

expected<layer_info> parse_config_json(const std::string& body, const std::string& what) {
  auto j = json::parse(body, nullptr, false);
  auto bad = [&](const std::string& why) {
    return invalid_argument(what + ": the layer config " + why);
  };
  if (j.is_discarded() || !j.is_object())
    return bad("is not a JSON object");
  layer_info info;
  for (auto [key, field] : {std::pair{"name", &info.name}, {"version", &info.version},
                            {"kind", &info.kind}, {"digest", &info.digest}}) {
    if (!j.contains(key) || !j[key].is_string())
      return bad(std::string{"has no string \""} + key + "\"");
    *field = j[key].get<std::string>();
  }
  if (!j.contains("size") || !j["size"].is_number_integer())
    return bad("has no \"size\"");
  info.size_bytes = j["size"].get<int64_t>();
  if (j.contains("config") && j["config"].is_object()) {
    auto& c = j["config"];
    if (c.contains("env") && c["env"].is_object())
      for (auto& [k, v] : c["env"].items())
        if (v.is_string())
          info.config.env[k] = v.get<std::string>();
    if (c.contains("workdir") && c["workdir"].is_string())
      info.config.workdir = c["workdir"].get<std::string>();
    if (c.contains("user") && c["user"].is_string())
      info.config.user = c["user"].get<std::string>();
  }
  info.ref = info.name + "@" + info.version;
  if (auto r = layers::parse_ref(info.ref); !r)
    return bad("names \"" + info.ref + "\": " + r.err().message);
  if (auto st = layers::validate_kind(info.kind); !st)
    return bad(st.err().message);
  if (!layers::is_valid_digest(info.digest))
    return bad("has digest \"" + info.digest + "\", not sha256:<64 hex>");
  return info;
}

/// Pushes `info`'s blobs and a manifest (with `subject` when not null)
/// under `tag` of `repo`; returns the manifest digest.
expected<std::string> push_artifact(const layers::store& st, const layer_info& info,
                                    registry_client& client, const std::string& repo,
                                    const std::string& tag, const json& subject) {
  auto what = "push layer " + info.ref + " to " + client.registry() + "/" + repo + ":" + tag;
  auto image = st.blob_path(info.digest);
  auto data = layers::read_data_blob_ref(image);
  if (!data)
    return error{data.err().code, what + ": " + data.err().message};
  json layers_json = json::array();
  if (auto s = client.push_blob_file(repo, info.digest, image); !s)
    return error{s.err().code, what + ": " + s.err().message};
  layers_json.push_back(descriptor_json(erofs_media_type, info.digest, uint64_t(info.size_bytes)));
  if (!data->digest.empty()) {
    // The data blob, and its chunk digest list so lazy readers verify chunks.
    auto path = layers::data_blob_path(image, data->digest);
    struct stat sb;
    if (::stat(path.c_str(), &sb) != 0)
      return sys_error(what + ": data blob", path, errno,
                       errno == ENOENT ? errc::not_found : errc::internal);
    if (auto s = client.push_blob_file(repo, data->digest, path); !s)
      return error{s.err().code, what + ": " + s.err().message};
    layers_json.push_back(descriptor_json(erofs_data_media_type, data->digest, uint64_t(sb.st_size)));
    auto list = make_chunk_list(path, default_chunk_size);
    if (!list)
      return error{list.err().code, what + ": " + list.err().message};
    auto list_digest = layers::sha256_string(*list);
    if (auto s = client.push_blob(repo, list_digest, *list); !s)
      return error{s.err().code, what + ": " + s.err().message};
    auto d = descriptor_json(chunk_list_media_type, list_digest, list->size());
    d["annotations"] = {{chunk_size_annotation, std::to_string(default_chunk_size)}};
    layers_json.push_back(d);
  }
  auto config = config_json(info);
  auto config_digest = layers::sha256_string(config);
  if (auto s = client.push_blob(repo, config_digest, config); !s)
    return error{s.err().code, what + ": " + s.err().message};
  json manifest = {{"schemaVersion", 2},
                   {"mediaType", oci_manifest_type},
                   {"artifactType", layer_artifact_type},
                   {"config", descriptor_json(layer_config_media_type, config_digest, config.size())},
                   {"layers", layers_json},
                   {"annotations", {{"dev.dsec.layer.ref", info.ref}}}};
  if (!subject.is_null())
    manifest["subject"] = subject;
  auto digest = client.put_manifest(repo, tag, oci_manifest_type, manifest.dump());
  if (!digest)
    return error{digest.err().code, what + ": " + digest.err().message};
  return digest;
}

/// The artifact manifest's blobs by role.
struct artifact_parts {
  const descriptor* image = nullptr;
  const descriptor* data = nullptr;
  const descriptor* chunks = nullptr;
};

expected<artifact_parts> artifact_layers(const oci_manifest& m, const std::string& what) {
  if (m.artifact_type != layer_artifact_type && m.config.media_type != layer_config_media_type)
    return invalid_argument(what + " is not a dsec layer (artifactType \"" + m.artifact_type
                            + "\", config " + m.config.media_type + ")");
  artifact_parts p;
  for (auto& d : m.layers) {
    if (d.media_type == erofs_media_type && !p.image)
      p.image = &d;
    else if (d.media_type == erofs_data_media_type && !p.data)
      p.data = &d;
    else if (d.media_type == chunk_list_media_type && !p.chunks)
      p.chunks = &d;
  }
  if (!p.image)
    return invalid_argument(what + ": the dsec layer has no " + erofs_media_type + " blob");
  return p;
}

/// Stores the data blob: registered for lazy reads (with its chunk list)
/// or downloaded whole under its name in blobs/.
status store_data_blob(layers::store& st, registry_client& client, const image_reference& ref,
                       const artifact_parts& p, const std::string& image_tmp, bool lazy,
                       const std::string& what) {
  auto recorded = layers::read_data_blob_ref(image_tmp);
  if (!recorded)
    return error{recorded.err().code, what + ": " + recorded.err().message};
  if (recorded->digest != p.data->digest)
    return invalid_argument(what + ": the metadata image records data blob " + recorded->digest
                            + ", the manifest names " + p.data->digest);
  auto final_path = st.root() + "/blobs/sha256-" + layers::digest_hex(p.data->digest)
                    + layers::data_blob_suffix;
  struct stat sb;
  if (::stat(final_path.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == p.data->size)
    return {}; // the whole blob is here already
  if (lazy) {
    blob_source src;
    src.registry = ref.registry;
    src.repository = ref.repository;
    src.digest = p.data->digest;
    src.size = uint64_t(p.data->size);
    src.chunk_size = default_chunk_size;
    if (p.chunks) {
      auto it = p.chunks->annotations.find(chunk_size_annotation);
      if (it != p.chunks->annotations.end())
        src.chunk_size = uint32_t(std::stoul(it->second));
      auto list = client.get_blob(ref.repository, p.chunks->digest, max_chunk_list_bytes);
      if (!list)
        return error{list.err().code, what + ": chunk list: " + list.err().message};
      if (list->size() / 32 != (src.size + src.chunk_size - 1) / src.chunk_size)
        return invalid_argument(what + ": the chunk list has " + std::to_string(list->size() / 32)
                                + " digests for a blob of "
                                + std::to_string((src.size + src.chunk_size - 1) / src.chunk_size)
                                + " chunks");
      if (auto s = save_chunk_list(st.root(), src.digest, *list); !s)
        return error{s.err().code, what + ": " + s.err().message};
    }
    // Where each file lies in the blob, so the daemon reads a file whole on
    // its first miss (registry/blob_extents.hpp). Written before the source,
    // which the daemon looks up first. An image the walk cannot read is
    // still served, a kernel read at a time.
    if (auto ext = layers::read_blob_extents(image_tmp); ext)
      if (auto s = save_blob_extents(st.root(), src.digest, *ext); !s)
        return error{s.err().code, what + ": " + s.err().message};
    if (auto s = register_blob_source(st.root(), src); !s)
      return error{s.err().code, what + ": " + s.err().message};
    return {};
  }
  auto tmp = st.root() + "/tmp/fetch-" + layers::digest_hex(p.data->digest).substr(0, 16) + "-"
             + std::to_string(::getpid()) + ".blob";
  if (auto s = client.get_blob_to_file(ref.repository, p.data->digest, p.data->size, tmp); !s)
    return error{s.err().code, what + ": " + s.err().message};
  // A lazy registration's symlink gives way to the whole blob.
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    auto err = errno;
    ::unlink(tmp.c_str());
    return sys_error(what + ": rename", tmp + " -> " + final_path, err);
  }
  return {};
}

/// Stores the dsec layer artifact whose manifest body `manifest` was read
/// from `ref`: config and metadata image fetched and verified, the data blob
/// registered for lazy reads or downloaded, then the layer committed under
/// the name and version it was pushed with (same digest).
expected<layer_info> fetch_layer_artifact(layers::store& st, const image_reference& ref,
                                          const std::string& manifest,
                                          const registry_options& opts, bool lazy) {
  auto what = "fetch layer artifact " + ref.str();
  auto m = parse_manifest(manifest, ref.str());
  if (!m)
    return m.err();
  auto parts = artifact_layers(*m, what);
  if (!parts)
    return parts.err();
  auto client = registry_client::open(ref.registry, opts);
  if (!client)
    return client.err();
  auto cfg = (*client)->get_blob(ref.repository, m->config.digest, max_config_bytes);
  if (!cfg)
    return error{cfg.err().code, what + ": config: " + cfg.err().message};
  auto info = parse_config_json(*cfg, what);
  if (!info)
    return info.err();
  if (info->digest != parts->image->digest || info->size_bytes != parts->image->size)
    return invalid_argument(what + ": the config names image " + info->digest + ", the manifest "
                            + parts->image->digest);
  // A layer this store has already (same ref, same digest) is not fetched again.
  if (auto have = st.resolve(info->ref); have && have->digest == info->digest
                                         && sys::exists(st.blob_path(info->digest)))
    return have;
  auto tmp = st.root() + "/tmp/fetch-" + layers::digest_hex(info->digest).substr(0, 16) + "-"
             + std::to_string(::getpid()) + ".erofs";
  if (auto s = sys::make_dirs(st.root() + "/tmp", 0755); !s)
    return s.err();
  if (auto s = (*client)->get_blob_to_file(ref.repository, info->digest, info->size_bytes, tmp); !s)
    return error{s.err().code, what + ": " + s.err().message};
  if (parts->data)
    if (auto s = store_data_blob(st, **client, ref, *parts, tmp, lazy, what); !s) {
      ::unlink(tmp.c_str());
      return s.err();
    }
  return st.add_blob(tmp, *info);
}

} // namespace

std::string conversion_tag(const std::string& source_digest) {
  return "sha256-" + layers::digest_hex(source_digest) + ".dsec";
}

expected<std::string> push_layer(const layers::store& st, const std::string& layer_ref,
                                 const image_reference& target, const registry_options& opts) {
  auto info = st.resolve(layer_ref);
  if (!info)
    return info.err();
  if (target.tag.empty())
    return invalid_argument("push layer " + layer_ref + " to " + target.str()
                            + ": the target needs a tag (REGISTRY/REPO:TAG)");
  auto client = registry_client::open(target.registry, opts);
  if (!client)
    return client.err();
  return push_artifact(st, *info, **client, target.repository, target.tag, nullptr);
}

status publish_conversion(const layers::store& st, const layer_info& info,
                          const image_reference& source, const std::string& source_digest,
                          const registry_options& opts) {
  auto client = registry_client::open(source.registry, opts);
  if (!client)
    return client.err();
  // The subject names the source image's manifest, so a registry with the
  // referrers API lists the conversion under it; the tag finds it elsewhere.
  auto src = (*client)->get_manifest(source.repository, source_digest);
  if (!src)
    return error{src.err().code, "publish conversion of " + source.str() + ": "
                                   + src.err().message};
  json subject = descriptor_json(src->media_type.empty() ? oci_manifest_type
                                                         : src->media_type.c_str(),
                                 source_digest, src->body.size());
  auto pushed = push_artifact(st, info, **client, source.repository,
                              conversion_tag(source_digest), subject);
  if (!pushed)
    return pushed.err();
  return {};
}

expected<layer_info> fetch_conversion(layers::store& st, const image_reference& source,
                                      const std::string& source_digest,
                                      const registry_options& opts, bool lazy) {
  auto client = registry_client::open(source.registry, opts);
  if (!client)
    return client.err();
  // The referrers API first (a registry that has it indexes the subject);
  // distribution 2.8 answers not_found, then the tag scheme.
  std::string manifest_ref = conversion_tag(source_digest);
  if (auto idx = (*client)->get_referrers(source.repository, source_digest, layer_artifact_type);
      idx) {
    if (auto parsed = parse_index(*idx, source.str() + " referrers"); parsed)
      for (auto& d : parsed->manifests)
        if (d.artifact_type == layer_artifact_type) {
          manifest_ref = d.digest;
          break;
        }
  }
  auto m = (*client)->get_manifest(source.repository, manifest_ref);
  if (!m) {
    if (m.err().code == errc::not_found)
      return not_found("no published conversion of " + source.str() + " (" + source_digest
                       + "): " + m.err().message);
    return m.err();
  }
  image_reference at = source;
  at.tag = manifest_ref.rfind("sha256:", 0) == 0 ? "" : manifest_ref;
  at.digest = manifest_ref.rfind("sha256:", 0) == 0 ? manifest_ref : "";
  return fetch_layer_artifact(st, at, m->body, opts, lazy);
}

} // namespace dsec::registry
