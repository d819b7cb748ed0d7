// Manifests, indexes and image configs as registries serve them (see
// manifest.hpp). Every number read is checked before it is used: digests
// spelled right, sizes non-negative, counts and sums within the limits, so a
// hostile registry cannot make a pull allocate or download without bound.
#include "registry/manifest.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "layers/digest.hpp"
#include "layers/oci_import.hpp"

namespace dsec::registry {

namespace {

using json = nlohmann::json;

constexpr const char* schema1_types[] = {
  "application/vnd.docker.distribution.manifest.v1+json",
  "application/vnd.docker.distribution.manifest.v1+prettyjws",
};

/// The media type without parameters ("a/b; charset=utf-8" -> "a/b").
std::string bare_type(std::string_view t) {
  auto semi = t.find(';');
  auto s = t.substr(0, semi);
  while (!s.empty() && s.back() == ' ')
    s.remove_suffix(1);
  return std::string(s);
}

std::map<std::string, std::string> read_annotations(const json& j) {
  std::map<std::string, std::string> out;
  if (auto it = j.find("annotations"); it != j.end() && it->is_object())
    for (auto& [k, v] : it->items())
      if (v.is_string())
        out[k] = v.get<std::string>();
  return out;
}

std::string str_field(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

expected<descriptor> read_descriptor(const json& j, const std::string& where) {
  if (!j.is_object())
    return invalid_argument(where + ": not an object");
  descriptor d;
  d.media_type = str_field(j, "mediaType");
  d.digest = str_field(j, "digest");
  d.artifact_type = str_field(j, "artifactType");
  if (!layers::is_valid_digest(d.digest))
    return invalid_argument(where + ": digest \"" + d.digest + "\" is not sha256:<64 hex>");
  auto size = j.find("size");
  if (size == j.end() || !size->is_number_integer() || size->get<int64_t>() < 0)
    return invalid_argument(where + ": size must be a non-negative integer");
  d.size = size->get<int64_t>();
  d.annotations = read_annotations(j);
  if (auto p = j.find("platform"); p != j.end() && p->is_object())
    d.plat = platform{str_field(*p, "os"), str_field(*p, "architecture"), str_field(*p, "variant")};
  return d;
}

bool one_of(std::string_view t, const char* const* begin, const char* const* end) {
  return std::any_of(begin, end, [&](const char* x) { return t == x; });
}

} // namespace

std::string manifest_accept_header() {
  return std::string(oci_manifest_type) + ", " + docker_manifest_type + ", " + oci_index_type +
         ", " + docker_list_type;
}

std::string platform::str() const {
  std::string out = (os.empty() ? "?" : os) + "/" + (architecture.empty() ? "?" : architecture);
  if (!variant.empty())
    out += "/" + variant;
  return out;
}

bool is_index_type(std::string_view media_type) {
  auto t = bare_type(media_type);
  return t == oci_index_type || t == docker_list_type;
}

bool is_layer_tar_type(std::string_view media_type) {
  return layers::is_layer_tar_media_type(bare_type(media_type));
}

expected<std::string> classify_manifest(std::string_view content_type, std::string_view body,
                                        const std::string& what) {
  std::string t = bare_type(content_type);
  bool generic = t.empty() || t == "application/json" || t == "text/plain" ||
                 t == "application/octet-stream";
  if (generic) {
    auto doc = json::parse(body, nullptr, false);
    if (doc.is_discarded() || !doc.is_object())
      return invalid_argument("manifest " + what + ": not a JSON object");
    t = str_field(doc, "mediaType");
    if (t.empty()) {
      // An OCI document may omit mediaType: tell them apart by shape.
      if (doc.contains("manifests"))
        t = oci_index_type;
      else if (doc.contains("layers") && doc.contains("config"))
        t = oci_manifest_type;
      else if (doc.contains("fsLayers") || doc.value("schemaVersion", 0) == 1)
        t = schema1_types[0];
    }
  }
  if (one_of(t, std::begin(schema1_types), std::end(schema1_types)))
    return invalid_argument("manifest " + what +
                            " is Docker schema 1 (deprecated, unsigned layers of unknown "
                            "digest): push the image again with a current client");
  if (is_index_type(t))
    return std::string("index");
  if (t == oci_manifest_type || t == docker_manifest_type)
    return std::string("manifest");
  return invalid_argument("manifest " + what + ": unsupported media type \"" + t +
                          "\" (expected an OCI or Docker schema 2 manifest or index)");
}

expected<oci_manifest> parse_manifest(std::string_view body, const std::string& what,
                                      const manifest_limits& limits) {
  std::string where = "manifest " + what;
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return invalid_argument(where + ": not a JSON object");
  if (doc.value("schemaVersion", 0) != 2)
    return invalid_argument(where + ": schemaVersion must be 2");
  oci_manifest m;
  m.media_type = str_field(doc, "mediaType");
  m.artifact_type = str_field(doc, "artifactType");
  m.annotations = read_annotations(doc);
  auto cfg = doc.find("config");
  if (cfg == doc.end())
    return invalid_argument(where + ": no config");
  auto c = read_descriptor(*cfg, where + " config");
  if (!c)
    return c.err();
  m.config = std::move(*c);
  auto ls = doc.find("layers");
  if (ls == doc.end() || !ls->is_array())
    return invalid_argument(where + ": \"layers\" must be an array");
  if (ls->size() > limits.max_layers)
    return too_large(where + " has " + std::to_string(ls->size()) + " layers, more than the " +
                     std::to_string(limits.max_layers) + " allowed");
  uint64_t total = 0;
  for (size_t i = 0; i < ls->size(); ++i) {
    auto l = read_descriptor((*ls)[i], where + " layer " + std::to_string(i));
    if (!l)
      return l.err();
    total += static_cast<uint64_t>(l->size);
    if (total > limits.max_image_bytes)
      return too_large(where + ": layers sum past " + std::to_string(limits.max_image_bytes) +
                       " bytes, the image size limit");
    m.layers.push_back(std::move(*l));
  }
  if (auto s = doc.find("subject"); s != doc.end() && !s->is_null()) {
    auto d = read_descriptor(*s, where + " subject");
    if (!d)
      return d.err();
    m.subject = std::move(*d);
  }
  return m;
}

expected<oci_index> parse_index(std::string_view body, const std::string& what,
                                const manifest_limits& limits) {
  std::string where = "index " + what;
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return invalid_argument(where + ": not a JSON object");
  if (doc.value("schemaVersion", 0) != 2)
    return invalid_argument(where + ": schemaVersion must be 2");
  oci_index x;
  x.media_type = str_field(doc, "mediaType");
  x.annotations = read_annotations(doc);
  auto ms = doc.find("manifests");
  if (ms == doc.end() || !ms->is_array())
    return invalid_argument(where + ": \"manifests\" must be an array");
  if (ms->size() > limits.max_manifests)
    return too_large(where + " has " + std::to_string(ms->size()) + " entries, more than the " +
                     std::to_string(limits.max_manifests) + " allowed");
  for (size_t i = 0; i < ms->size(); ++i) {
    auto d = read_descriptor((*ms)[i], where + " entry " + std::to_string(i));
    if (!d)
      return d.err();
    x.manifests.push_back(std::move(*d));
  }
  return x;
}

expected<descriptor> pick_platform(const oci_index& index, const std::string& what,
                                   const std::string& os, const std::string& architecture) {
  std::vector<std::string> have;
  for (const auto& d : index.manifests) {
    if (!d.plat) {
      have.push_back("(no platform)");
      continue;
    }
    // Attestation manifests (buildx) carry platform unknown/unknown.
    if (d.plat->os == os && d.plat->architecture == architecture)
      return d;
    auto p = d.plat->str();
    if (std::find(have.begin(), have.end(), p) == have.end())
      have.push_back(p);
  }
  std::string list;
  for (const auto& p : have)
    list += (list.empty() ? "" : ", ") + p;
  return not_found("index " + what + " has no " + os + "/" + architecture + " image; it has " +
                   (list.empty() ? std::string("no entries") : list));
}

expected<layer_config> parse_image_config(std::string_view body, const std::string& what) {
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return invalid_argument("image config " + what + ": not a JSON object");
  layer_config out;
  auto cfg = doc.find("config");
  if (cfg == doc.end() || !cfg->is_object())
    return out;
  if (auto env = cfg->find("Env"); env != cfg->end() && env->is_array()) {
    for (const auto& e : *env) {
      if (!e.is_string())
        continue;
      auto s = e.get<std::string>();
      auto eq = s.find('=');
      if (eq == 0 || s.empty())
        continue;
      if (eq == std::string::npos)
        out.env[s] = "";
      else
        out.env[s.substr(0, eq)] = s.substr(eq + 1);
    }
  }
  out.workdir = str_field(*cfg, "WorkingDir");
  out.user = str_field(*cfg, "User");
  return out;
}

} // namespace dsec::registry
