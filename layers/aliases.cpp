#include "layers/aliases.hpp"

#include <cerrno>

#include <nlohmann/json.hpp>

#include "layers/catalog.hpp"
#include "sys/fs.hpp"

namespace dsec::layers {

namespace {

std::string aliases_path(const std::string& root) { return root + "/aliases.json"; }

/// Reads, changes and writes the file under the catalog lock.
template <class Change>
status update(const store& s, Change change) {
  auto held = catalog::lock::acquire(s.root() + "/catalog.lock");
  if (!held)
    return held.err();
  auto all = read_aliases(s.root());
  if (!all)
    return all.err();
  if (auto st = change(*all); !st)
    return st;
  nlohmann::json j(*all);
  return sys::write_file_atomic(aliases_path(s.root()), j.dump(2) + "\n");
}

} // namespace

status check_alias_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return invalid_argument("layer alias: a name is 1 to 64 characters");
  auto ok_first = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!ok_first(name[0]))
    return invalid_argument("layer alias \"" + std::string{name}
                            + "\": must start with a lowercase letter or a digit");
  for (char c : name)
    if (!ok_first(c) && c != '.' && c != '_' && c != '-')
      return invalid_argument("layer alias \"" + std::string{name}
                              + "\": only [a-z0-9._-] (a ref has '@', an alias does not)");
  return {};
}

expected<alias_map> read_aliases(const std::string& root) {
  auto path = aliases_path(root);
  auto text = sys::read_file(path);
  if (!text) {
    if (text.err().code == errc::not_found)
      return alias_map{};
    return text.err();
  }
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return internal_error("layer aliases " + path + ": not a JSON object");
  alias_map out;
  for (auto& [name, ref] : j.items()) {
    if (!ref.is_string() || !check_alias_name(name))
      return internal_error("layer aliases " + path + ": bad entry \"" + name + "\"");
    out[name] = ref.get<std::string>();
  }
  return out;
}

status set_alias(const store& s, const std::string& name, const std::string& ref) {
  if (auto st = check_alias_name(name); !st)
    return st;
  if (auto l = s.resolve(ref); !l)
    return error{l.err().code, "layer alias " + name + " -> " + ref + ": " + l.err().message};
  return update(s, [&](alias_map& all) -> status {
    all[name] = ref;
    return {};
  });
}

status remove_alias(const store& s, const std::string& name) {
  if (auto st = check_alias_name(name); !st)
    return st;
  return update(s, [&](alias_map& all) -> status {
    if (all.erase(name) == 0)
      return not_found("layer alias " + name + ": no such alias in " + s.root());
    return {};
  });
}

} // namespace dsec::layers
