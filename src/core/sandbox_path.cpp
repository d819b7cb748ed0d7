// The one grammar of sandbox paths (see sandbox_path.hpp).
#include "core/sandbox_path.hpp"

namespace dsec {

expected<std::vector<std::string>> parse_sandbox_path(std::string_view path, path_form form) {
  auto refuse = [&](const char* rule) -> error {
    std::string shown{path.substr(0, 200)};
    for (auto& ch : shown)
      if (ch == '\0')
        ch = '?';
    return invalid_argument("path \"" + shown + "\": " + rule);
  };
  if (path.size() > max_sandbox_path)
    return refuse("longer than 4096 bytes");
  if (path.find('\0') != std::string_view::npos)
    return refuse("contains a NUL byte");
  bool absolute = !path.empty() && path[0] == '/';
  if (form == path_form::relative ? absolute || path.empty() : !absolute)
    return refuse(form == path_form::relative ? "must be a relative path" : "must be absolute");
  std::vector<std::string> parts;
  size_t i = absolute ? 1 : 0;
  while (i <= path.size()) {
    auto j = path.find('/', i);
    if (j == std::string_view::npos)
      j = path.size();
    auto c = path.substr(i, j - i);
    if (c == "..")
      return refuse("\"..\" is not allowed");
    bool empty = c.empty() || c == ".";
    // "/" alone is the root, written normalised.
    if (empty && form == path_form::normalised && path.size() > 1)
      return refuse("must be normalised (no \"//\", \".\" or trailing '/')");
    if (!empty)
      parts.emplace_back(c);
    i = j + 1;
  }
  if (parts.empty() && form == path_form::entry)
    return refuse("names the root directory");
  if (parts.empty() && form == path_form::relative)
    return refuse("names no file");
  return parts;
}

} // namespace dsec
