// A dsec layer artifact pulled whole (see image_pull_artifact.hpp). Both
// blobs are downloaded and verified before anything is committed, so a
// failure leaves the catalog untouched; the image then goes through
// store::add_blob (size and digest checked again) and the data blob beside it.
#include "registry/image_pull_artifact.hpp"

#include <cerrno>
#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/layer_ref.hpp"
#include "layers/blob_device.hpp"
#include "layers/digest.hpp"
#include "layers/store.hpp"
#include "layers/transfer.hpp"
#include "registry/layer_artifact.hpp"
#include "registry/registry_client.hpp"
#include "sys/fs.hpp"

namespace dsec::registry {

namespace {

using json = nlohmann::json;

constexpr size_t max_config_bytes = 1u << 20;

/// The layer a config blob describes: name, version, kind, digest, size and
/// exec defaults, as push_layer writes them.
expected<layer_info> parse_layer_config(const std::string& body, const std::string& what) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(what + ": the layer config is not a JSON object");
  layer_info info;
  for (auto [key, field] : {std::pair{"name", &info.name}, {"version", &info.version},
                            {"kind", &info.kind}, {"digest", &info.digest}}) {
    if (!j.contains(key) || !j[key].is_string())
      return invalid_argument(what + ": the layer config has no string \"" + key + "\"");
    *field = j[key].get<std::string>();
  }
  if (auto s = j.find("size"); s != j.end() && s->is_number_integer())
    info.size_bytes = s->get<int64_t>();
  if (auto c = j.find("config"); c != j.end() && c->is_object()) {
    if (auto env = c->find("env"); env != c->end() && env->is_object())
      for (auto& [k, v] : env->items())
        if (v.is_string())
          info.config.env[k] = v.get<std::string>();
    if (auto w = c->find("workdir"); w != c->end() && w->is_string())
      info.config.workdir = w->get<std::string>();
    if (auto u = c->find("user"); u != c->end() && u->is_string())
      info.config.user = u->get<std::string>();
  }
  return info;
}

} // namespace

bool is_layer_artifact(const oci_manifest& m) {
  return m.artifact_type == layer_artifact_type || m.config.media_type == layer_config_media_type;
}

expected<pull_result> pull_layer_artifact(layers::store& st, registry_client& client,
                                          const image_reference& ref, const oci_manifest& m,
                                          const std::string& manifest_digest,
                                          const pull_options& opts) {
  auto what = "layer artifact " + ref.str();
  if (opts.lazy)
    return invalid_argument(what + ": lazy pulls of layer artifacts are done by the image "
                                   "resolver (fetch_conversion), not by pull_image");
  const descriptor* image = nullptr;
  const descriptor* data = nullptr;
  for (const auto& l : m.layers) {
    if (l.media_type == erofs_media_type && !image)
      image = &l;
    else if (l.media_type == erofs_data_media_type && !data)
      data = &l;
  }
  if (!image)
    return invalid_argument(what + ": no " + std::string(erofs_media_type) + " layer");
  auto cfg = client.get_blob(ref.repository, m.config.digest, max_config_bytes);
  if (!cfg)
    return error{cfg.err().code, what + ": config: " + cfg.err().message};
  auto info = parse_layer_config(*cfg, what);
  if (!info)
    return info.err();
  if (info->digest != image->digest)
    return invalid_argument(what + ": the config names image " + info->digest +
                            ", the manifest " + image->digest);
  info->size_bytes = image->size;
  if (!opts.name.empty()) {
    info->name = opts.name;
    info->version = opts.version;
  }
  if (!opts.kind.empty())
    info->kind = opts.kind;
  info->ref = info->name + "@" + info->version;
  for (auto s : {layers::validate_name(info->name), layers::validate_version(info->version),
                 layers::validate_kind(info->kind)})
    if (!s)
      return error{s.err().code, what + ": " + s.err().message};

  sys::scoped_tree staging;
  std::string tmpl = st.root() + "/tmp/pull-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return sys_error(what + ": create staging dir", tmpl, errno);
  staging.path = tmpl;
  auto image_tmp = staging.path + "/image.erofs";
  auto data_tmp = staging.path + "/data.blob";
  if (auto s = client.get_blob_to_file(ref.repository, image->digest, image->size, image_tmp); !s)
    return error{s.err().code, what + ": " + s.err().message};
  auto named = layers::read_data_blob_ref(image_tmp);
  if (!named)
    return error{named.err().code, what + ": " + named.err().message};
  bool need_data = false;
  if (!named->digest.empty()) {
    if (!data || data->digest != named->digest)
      return invalid_argument(what + ": the image names data blob " + named->digest +
                              " but the manifest does not carry it");
    auto have = layers::data_blob_path(st.blob_path(info->digest), named->digest);
    struct stat sb {};
    need_data = ::stat(have.c_str(), &sb) != 0;
    if (need_data)
      if (auto s = client.get_blob_to_file(ref.repository, data->digest, data->size, data_tmp); !s)
        return error{s.err().code, what + ": " + s.err().message};
  }
  auto committed = layers::commit_fetched_image(st, image_tmp, *info);
  if (!committed)
    return error{committed.err().code, what + ": " + committed.err().message};
  pull_result out;
  if (!committed->data_digest.empty()) {
    if (!need_data)
      return internal_error(what + ": the store lost data blob " + committed->data_digest);
    auto d = layers::commit_fetched_data_blob(st, data_tmp, committed->info, committed->data_digest);
    if (!d)
      return error{d.err().code, what + ": " + d.err().message};
    out.bytes_written += static_cast<uint64_t>(data->size);
  }
  out.info = committed->info;
  out.manifest_digest = manifest_digest;
  out.artifact = true;
  out.bytes_written += static_cast<uint64_t>(image->size);
  return out;
}

} // namespace dsec::registry
