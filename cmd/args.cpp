// CLI argument parsing.
#include "cmd/args.hpp"

#include <cerrno>
#include <cstdlib>

namespace dsec::cli {

std::string args::get(const std::string& name, const std::string& fallback) const {
  auto range = flags.equal_range(name);
  std::string out = fallback;
  for (auto it = range.first; it != range.second; ++it)
    out = it->second;
  return out;
}

std::vector<std::string> args::all(const std::string& name) const {
  std::vector<std::string> out;
  auto range = flags.equal_range(name);
  for (auto it = range.first; it != range.second; ++it)
    out.push_back(it->second);
  return out;
}

expected<args> parse_args(const std::vector<std::string>& words,
                          const std::set<std::string>& value_flags,
                          const std::set<std::string>& bool_flags,
                          bool stop_at_second_positional) {
  args out;
  for (size_t i = 0; i < words.size(); ++i) {
    auto& w = words[i];
    if (w == "--") {
      out.positional.insert(out.positional.end(), words.begin() + static_cast<long>(i) + 1,
                            words.end());
      break;
    }
    if (w.size() < 3 || w.compare(0, 2, "--") != 0) {
      if (stop_at_second_positional && !out.positional.empty()) {
        out.positional.insert(out.positional.end(), words.begin() + static_cast<long>(i),
                              words.end());
        break;
      }
      out.positional.push_back(w);
      continue;
    }
    auto eq = w.find('=');
    auto name = w.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (bool_flags.count(name)) {
      if (eq != std::string::npos)
        return invalid_argument("--" + name + " takes no value");
      out.flags.emplace(name, "1");
    } else if (value_flags.count(name)) {
      if (eq != std::string::npos) {
        out.flags.emplace(name, w.substr(eq + 1));
      } else {
        if (i + 1 >= words.size())
          return invalid_argument("--" + name + " needs a value");
        out.flags.emplace(name, words[++i]);
      }
    } else {
      return invalid_argument("unknown flag --" + name);
    }
  }
  return out;
}

expected<long long> to_int(const std::string& flag, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  auto v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE)
    return invalid_argument("--" + flag + ": \"" + value + "\" is not a whole number");
  return v;
}

expected<double> to_double(const std::string& flag, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  auto v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || errno == ERANGE)
    return invalid_argument("--" + flag + ": \"" + value + "\" is not a number");
  return v;
}

} // namespace dsec::cli
