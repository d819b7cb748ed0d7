// <store>/images.json (see image_index.hpp): which layer each pulled image
// reference became. Read without a lock (writers rename whole files into
// place); written under the catalog lock, as aliases.json is.
#include "registry/image_index.hpp"

#include <cerrno>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "layers/catalog.hpp"
#include "layers/store.hpp"
#include "sys/fs.hpp"

namespace dsec::registry {

namespace {

using json = nlohmann::json;

std::string index_path(const layers::store& st) { return st.root() + "/images.json"; }

/// The whole file as JSON; an absent file is an empty index.
expected<json> read_index(const layers::store& st) {
  auto path = index_path(st);
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) {
    if (errno == ENOENT)
      return json{{"version", 1}, {"images", json::object()}};
    return sys_error("stat", path, errno);
  }
  auto text = sys::read_file(path);
  if (!text)
    return text.err();
  auto doc = json::parse(*text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("images") ||
      !doc["images"].is_object())
    return internal_error("image index " + path + " is corrupt (expected {\"version\":1,"
                          "\"images\":{...}}): move it away to start afresh");
  return doc;
}

} // namespace

expected<std::optional<image_entry>> find_image(const layers::store& st,
                                                const std::string& canonical) {
  auto doc = read_index(st);
  if (!doc)
    return doc.err();
  auto& images = (*doc)["images"];
  auto it = images.find(canonical);
  if (it == images.end() || !it->is_object())
    return std::optional<image_entry>{};
  image_entry e;
  e.layer = it->value("layer", std::string());
  e.manifest = it->value("manifest", std::string());
  e.at_ms = it->value("at_ms", int64_t{0});
  if (e.layer.empty())
    return internal_error("image index " + index_path(st) + ": entry \"" + canonical +
                          "\" names no layer");
  return std::optional<image_entry>{std::move(e)};
}

status record_image(const layers::store& st, const std::string& canonical,
                    const image_entry& entry) {
  auto held = layers::catalog::lock::acquire(st.root() + "/catalog.lock");
  if (!held)
    return held.err();
  auto doc = read_index(st);
  if (!doc)
    return doc.err();
  (*doc)["version"] = 1;
  (*doc)["images"][canonical] = {
      {"layer", entry.layer}, {"manifest", entry.manifest}, {"at_ms", entry.at_ms}};
  return sys::write_file_atomic(index_path(st), doc->dump(2) + "\n");
}

} // namespace dsec::registry
