// E2B envd filesystem messages, GET/POST /files uploads and base64
// (e2b_codec.hpp), split from e2b_codec.cpp by mechanism.
#include "api/e2b_codec.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <ctime>

#include <nlohmann/json.hpp>

#include "api/e2b_codec_detail.hpp"
#include "core/sandbox_path.hpp"

namespace dsec::e2b {

namespace {

using detail::parse_object;
using nlohmann::json;

std::string iso_ns(int64_t ns) {
  std::time_t secs = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  char frac[16];
  snprintf(frac, sizeof(frac), ".%09dZ", static_cast<int>(ns % 1000000000));
  return std::string{buf} + frac;
}

std::string permissions(uint32_t mode) {
  std::string p(10, '-');
  if (S_ISDIR(mode))
    p[0] = 'd';
  else if (S_ISLNK(mode))
    p[0] = 'L';
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i)
    if (mode & (1u << (8 - i)))
      p[1 + i] = rwx[i];
  return p;
}

std::string owner_name(uint32_t id) { return id == 0 ? "root" : std::to_string(id); }

/// The name of `id` in `names` (the sandbox's own), else owner_name.
std::string named(const std::map<uint32_t, std::string>* names, uint32_t id) {
  if (names)
    if (auto it = names->find(id); it != names->end())
      return it->second;
  return owner_name(id);
}

/// `path` with "." and ".." resolved lexically (".." at the root stays there).
std::string clean_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    auto slash = path.find('/', pos);
    if (slash == std::string::npos)
      slash = path.size();
    auto part = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (part.empty() || part == ".")
      continue;
    if (part == "..") {
      if (!parts.empty())
        parts.pop_back();
      continue;
    }
    parts.push_back(std::move(part));
  }
  std::string out;
  for (auto& p : parts)
    out += "/" + p;
  return out.empty() ? "/" : out;
}

} // namespace

// -- filesystem.Filesystem ---------------------------------------------------------

expected<std::string> sandbox_path(std::string_view path, std::string_view home) {
  if (path.empty())
    return invalid_argument("path: must not be empty");
  // E2B sends relative paths as well: they start at `home`, then the path is
  // held to the one grammar of sandbox paths (core/sandbox_path.hpp).
  std::string p{path};
  if (p[0] != '/')
    p = std::string{home} + (!home.empty() && home.back() == '/' ? "" : "/") + p;
  if (auto parts = parse_sandbox_path(p, path_form::entry_or_root); !parts)
    return parts.err();
  return p;
}

expected<fs_request> parse_fs(std::string_view body, bool move, std::string_view home) {
  auto j = parse_object(body, "filesystem request");
  if (!j)
    return j.err();
  fs_request r;
  auto field = [&](const char* name) -> expected<std::string> {
    auto it = j->find(name);
    if (it == j->end() || !it->is_string())
      return invalid_argument(std::string{"filesystem: "} + name + " is required");
    return sandbox_path(it->get<std::string>(), home);
  };
  auto path = field(move ? "source" : "path");
  if (!path)
    return path.err();
  r.path = *path;
  if (move) {
    auto to = field("destination");
    if (!to)
      return to.err();
    r.to = *to;
  }
  if (auto d = j->find("depth"); d != j->end() && !d->is_null()) {
    if (!d->is_number_integer() || d->get<int64_t>() < 0 || d->get<int64_t>() > 64)
      return invalid_argument("list dir: depth must be an integer between 1 and 64");
    r.depth = std::max<int32_t>(1, static_cast<int32_t>(d->get<int64_t>()));
  }
  return r;
}

expected<fs_request> parse_watch(std::string_view body, std::string_view home) {
  auto r = parse_fs(body, false, home);
  if (!r)
    return r.err();
  auto j = json::parse(body, nullptr, false);
  auto rec = j.find("recursive");
  r->depth = rec != j.end() && rec->is_boolean() && rec->get<bool>() ? 16 : 1;
  auto entry = j.find("includeEntry");
  r->include_entry = entry != j.end() && entry->is_boolean() && entry->get<bool>();
  return r;
}

std::string watch_event(const std::string& name, const char* type) {
  return json{{"filesystem", {{"name", name}, {"type", type}}}}.dump();
}

std::string watch_event(const std::string& name, const char* type, const fs_entry& entry,
                        const owner_names* names) {
  auto j = json{{"filesystem", {{"name", name}, {"type", type}}}};
  j["filesystem"]["entry"] = json::parse(encode_entry(entry, names));
  return j.dump();
}

/// A directory's size as E2B's envd reports it on ext4: its entries' blocks,
/// at least one 4 KiB block. A sandbox's writable upper is btrfs, where a
/// directory's size is the length of its entries' names (an empty one is 0,
/// which E2B's SDK tests take for a missing size); EROFS lowers inline small
/// directories in fewer bytes. Files keep their exact size.
namespace {
int64_t e2b_entry_size(const fs_entry& e) {
  constexpr int64_t block = 4096;
  if (e.type != "dir")
    return e.size;
  return std::max<int64_t>(block, (e.size + block - 1) / block * block);
}
} // namespace

std::string encode_entry(const fs_entry& e, const owner_names* names) {
  const char* type = e.type == "file"      ? "FILE_TYPE_FILE"
                     : e.type == "dir"     ? "FILE_TYPE_DIRECTORY"
                     : e.type == "symlink" ? "FILE_TYPE_SYMLINK"
                                           : "FILE_TYPE_UNSPECIFIED";
  json j{{"name", e.name},
         {"type", type},
         {"path", e.path},
         {"size", std::to_string(e2b_entry_size(e))},
         {"mode", e.mode & 07777},
         {"permissions", permissions(e.mode)},
         {"owner", named(names ? &names->users : nullptr, e.uid)},
         {"group", named(names ? &names->groups : nullptr, e.gid)},
         {"modifiedTime", iso_ns(e.mtime_ns)}};
  if (!e.symlink_target.empty())
    j["symlinkTarget"] = resolved_link(e.path, e.symlink_target);
  if (!e.metadata.empty()) // envd 0.6.2: the file's user.e2b.* attributes
    j["metadata"] = e.metadata;
  return j.dump();
}

std::string resolved_link(const std::string& path, const std::string& target) {
  if (!target.empty() && target[0] == '/')
    return clean_path(target);
  auto dir = path.substr(0, path.rfind('/'));
  return clean_path(dir + "/" + target);
}

void sort_walk_order(std::vector<fs_entry>& v) {
  // Path order with '/' below every other byte: a directory's entries follow
  // it, before its next sibling, and siblings are in byte order.
  auto key = [](const std::string& p) {
    std::string k = p;
    std::replace(k.begin(), k.end(), '/', '\0');
    return k;
  };
  std::sort(v.begin(), v.end(),
            [&](const fs_entry& a, const fs_entry& b) { return key(a.path) < key(b.path); });
}

std::string encode_entry_response(const fs_entry& e, const owner_names* names) {
  return "{\"entry\":" + encode_entry(e, names) + "}";
}

std::string encode_entries(const std::vector<fs_entry>& v, const owner_names* names) {
  std::string out = "{\"entries\":[";
  for (size_t i = 0; i < v.size(); ++i)
    out += (i ? "," : "") + encode_entry(v[i], names);
  return out + "]}";
}

// -- GET/POST /files -------------------------------------------------------------------

expected<std::vector<upload>> parse_multipart(std::string_view content_type,
                                              std::string_view body,
                                              const std::string& query_path,
                                              std::string_view home) {
  auto b = content_type.find("boundary=");
  if (b == std::string_view::npos)
    return invalid_argument("upload: multipart/form-data without a boundary");
  auto boundary = content_type.substr(b + 9);
  if (auto semi = boundary.find(';'); semi != std::string_view::npos)
    boundary = boundary.substr(0, semi);
  if (boundary.size() >= 2 && boundary.front() == '"' && boundary.back() == '"')
    boundary = boundary.substr(1, boundary.size() - 2);
  if (boundary.empty() || boundary.size() > 200)
    return invalid_argument("upload: bad multipart boundary");
  std::string delim = "--" + std::string{boundary};
  std::vector<upload> out;
  auto pos = body.find(delim);
  if (pos == std::string_view::npos)
    return invalid_argument("upload: multipart body has no part");
  while (true) {
    pos += delim.size();
    if (body.substr(pos, 2) == "--")
      break;
    if (body.substr(pos, 2) != "\r\n")
      return invalid_argument("upload: malformed multipart delimiter");
    pos += 2;
    auto head_end = body.find("\r\n\r\n", pos);
    if (head_end == std::string_view::npos)
      return invalid_argument("upload: multipart part without headers");
    auto head = body.substr(pos, head_end - pos);
    auto data_start = head_end + 4;
    auto next = body.find("\r\n" + delim, data_start);
    if (next == std::string_view::npos)
      return invalid_argument("upload: multipart part is not terminated");
    auto data = body.substr(data_start, next - data_start);
    pos = next + 2;
    std::string filename;
    bool is_file = false;
    std::string lower{head};
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (auto cd = lower.find("content-disposition:"); cd != std::string::npos) {
      auto line_end = head.find("\r\n", cd);
      auto line = head.substr(cd, line_end == std::string_view::npos ? head.npos : line_end - cd);
      is_file = line.find("name=\"file\"") != std::string_view::npos;
      if (auto fn = line.find("filename=\""); fn != std::string_view::npos) {
        auto end = line.find('"', fn + 10);
        if (end != std::string_view::npos)
          filename = std::string{line.substr(fn + 10, end - fn - 10)};
      }
    }
    if (!is_file)
      continue;
    auto target = !query_path.empty() ? query_path : filename;
    auto path = sandbox_path(target, home);
    if (!path)
      return error{errc::invalid_argument, "upload: " + path.err().message};
    out.push_back({*path, std::string{data}});
  }
  if (out.empty())
    return invalid_argument("upload: no part named \"file\"");
  return out;
}

std::string encode_written(const std::vector<std::string>& paths) {
  json arr = json::array();
  for (auto& p : paths) {
    auto slash = p.rfind('/');
    arr.push_back({{"name", p.substr(slash + 1)}, {"type", "file"}, {"path", p}});
  }
  return arr.dump();
}

std::string base64(std::string_view in) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint32_t{static_cast<uint8_t>(in[i])} << 16)
                 | (uint32_t{static_cast<uint8_t>(in[i + 1])} << 8) | static_cast<uint8_t>(in[i + 2]);
    out += tbl[v >> 18];
    out += tbl[(v >> 12) & 63];
    out += tbl[(v >> 6) & 63];
    out += tbl[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint32_t{static_cast<uint8_t>(in[i])} << 16;
    out += tbl[v >> 18];
    out += tbl[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint32_t{static_cast<uint8_t>(in[i])} << 16)
                 | (uint32_t{static_cast<uint8_t>(in[i + 1])} << 8);
    out += tbl[v >> 18];
    out += tbl[(v >> 12) & 63];
    out += tbl[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

} // namespace dsec::e2b
