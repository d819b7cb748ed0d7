// Catalog parsing, serialisation, atomic save and the writer lock. The JSON
// is read with exceptions disabled (parse(..., nullptr, false)) and every
// field is type-checked before use, so a corrupt file becomes an error, never
// an exception or a crash.
#include "layers/catalog.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "core/layer_config.hpp"
#include "layers/digest.hpp"
#include "layers/store.hpp"
#include "sys/fs.hpp"

namespace dsec::layers::catalog {

namespace {

using json = nlohmann::json;

constexpr int format_version = 1;

error corrupt(const std::string& path, const std::string& what) {
  return internal_error("read layer catalog " + path + ": " + what
                        + " (fix or move the file away; the store will not overwrite it)");
}

expected<layer_info> parse_entry(const std::string& ref, const json& j, const std::string& path) {
  auto where = "entry \"" + ref + "\"";
  if (!j.is_object())
    return corrupt(path, where + " is not an object");
  auto parsed = parse_ref(ref);
  if (!parsed)
    return corrupt(path, where + ": " + parsed.err().message);
  layer_info info;
  info.ref = ref;
  info.name = parsed->name;
  info.version = parsed->version;
  auto kind = j.find("kind");
  auto digest = j.find("digest");
  auto size = j.find("size_bytes");
  auto created = j.find("created_at_ms");
  if (kind == j.end() || !kind->is_string() || !validate_kind(kind->get<std::string>()))
    return corrupt(path, where + ": \"kind\" is missing or not a known kind");
  if (digest == j.end() || !digest->is_string() || !is_valid_digest(digest->get<std::string>()))
    return corrupt(path, where + ": \"digest\" is missing or not sha256:<64 hex>");
  if (size == j.end() || !size->is_number_integer())
    return corrupt(path, where + ": \"size_bytes\" is missing or not an integer");
  if (created == j.end() || !created->is_number_integer())
    return corrupt(path, where + ": \"created_at_ms\" is missing or not an integer");
  info.kind = kind->get<std::string>();
  info.digest = digest->get<std::string>();
  info.size_bytes = size->get<int64_t>();
  info.created_at_ms = created->get<int64_t>();
  // Exec defaults: optional (catalogs written before they existed lack them).
  if (auto cfg = j.find("config"); cfg != j.end()) {
    auto bad = [&](const std::string& what) { return corrupt(path, where + ": \"config\" " + what); };
    if (!cfg->is_object())
      return bad("is not an object");
    if (auto env = cfg->find("env"); env != cfg->end()) {
      if (!env->is_object())
        return bad("env is not an object");
      for (auto e = env->begin(); e != env->end(); ++e) {
        if (!e.value().is_string())
          return bad("env value of " + e.key() + " is not a string");
        info.config.env[e.key()] = e.value().get<std::string>();
      }
    }
    for (auto [key, field] : {std::pair{"workdir", &info.config.workdir},
                              std::pair{"user", &info.config.user}}) {
      auto f = cfg->find(key);
      if (f == cfg->end())
        continue;
      if (!f->is_string())
        return bad(std::string{key} + " is not a string");
      *field = f->get<std::string>();
    }
    if (auto start = cfg->find("start"); start != cfg->end()) {
      if (!start->is_array())
        return bad("start is not an array");
      for (auto& a : *start) {
        if (!a.is_string())
          return bad("start holds a non-string");
        info.config.start.push_back(a.get<std::string>());
      }
    }
    if (auto st = validate_layer_config(info.config); !st)
      return corrupt(path, where + ": " + st.err().message);
  }
  return info;
}

// Only the fields set: a layer without exec defaults is written as before.
json config_json(const layer_config& c) {
  json out = json::object();
  if (!c.env.empty())
    out["env"] = c.env;
  if (!c.workdir.empty())
    out["workdir"] = c.workdir;
  if (!c.user.empty())
    out["user"] = c.user;
  if (!c.start.empty())
    out["start"] = c.start;
  return out;
}

} // namespace

expected<entries> parse(std::string_view text, const std::string& path) {
  auto j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded())
    return corrupt(path, "not valid JSON");
  if (!j.is_object())
    return corrupt(path, "top level is not a JSON object");
  auto ver = j.find("version");
  if (ver == j.end() || !ver->is_number_integer() || ver->get<int64_t>() != format_version)
    return corrupt(path, "\"version\" is missing or not 1 (written by a newer dsec?)");
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_object())
    return corrupt(path, "\"layers\" is missing or not an object");
  entries out;
  for (auto it = layers->begin(); it != layers->end(); ++it) {
    auto info = parse_entry(it.key(), it.value(), path);
    if (!info)
      return info.err();
    out.emplace(it.key(), std::move(*info));
  }
  return out;
}

std::string serialize(const entries& e) {
  json layers = json::object();
  for (auto& [ref, info] : e) {
    json entry = {{"kind", info.kind},
                  {"digest", info.digest},
                  {"size_bytes", info.size_bytes},
                  {"created_at_ms", info.created_at_ms}};
    if (auto cfg = config_json(info.config); !cfg.empty())
      entry["config"] = std::move(cfg);
    layers[ref] = std::move(entry);
  }
  json doc = {{"version", format_version}, {"layers", std::move(layers)}};
  return doc.dump(1) + "\n";
}

expected<entries> load(const std::string& path) {
  auto text = sys::read_file(path);
  if (!text) {
    if (text.err().code == errc::not_found)
      return entries{};
    return error{text.err().code, "read layer catalog: " + text.err().message};
  }
  return parse(*text, path);
}

status sync_dir(const std::string& dir) {
  sys::unique_fd fd{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (!fd)
    return sys_error("open directory", dir, errno);
  // Some network file systems reject fsync on a directory; their rename is
  // already durable on the server, so EINVAL is not a failure.
  if (::fsync(fd.get()) != 0 && errno != EINVAL)
    return sys_error("fsync directory", dir, errno);
  return {};
}

status save(const std::string& path, const entries& e) {
  if (auto st = sys::write_file_atomic(path, serialize(e)); !st)
    return error{st.err().code, "write layer catalog: " + st.err().message};
  auto slash = path.rfind('/');
  return sync_dir(slash == std::string::npos ? "." : path.substr(0, slash));
}

expected<lock> lock::acquire(const std::string& path) {
  sys::unique_fd fd{::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
  if (!fd)
    return sys_error("open catalog lock", path, errno);
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR)
      return sys_error("flock catalog lock", path, errno);
  }
  return lock{std::move(fd)};
}

} // namespace dsec::layers::catalog
