// Multi-range requests and multipart/byteranges answers (see byteranges.hpp).
#include "registry/byteranges.hpp"

#include <algorithm>
#include <cctype>

namespace dsec::registry {

namespace {

struct part {
  uint64_t first = 0, last = 0, total = 0;  ///< Content-Range: bytes first-last/total
  std::string_view data;
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// "bytes a-b/n" (n may be "*"); false if malformed.
bool parse_content_range(std::string_view v, part& p) {
  while (!v.empty() && v.front() == ' ')
    v.remove_prefix(1);
  if (lower(v.substr(0, 6)) != "bytes ")
    return false;
  v.remove_prefix(6);
  auto num = [&](uint64_t& out) {
    size_t i = 0;
    out = 0;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i])) && i < 19)
      out = out * 10 + uint64_t(v[i++] - '0');
    v.remove_prefix(i);
    return i > 0;
  };
  if (!num(p.first) || v.empty() || v.front() != '-')
    return false;
  v.remove_prefix(1);
  if (!num(p.last) || v.empty() || v.front() != '/' || p.last < p.first)
    return false;
  v.remove_prefix(1);
  p.total = UINT64_MAX;
  return (!v.empty() && v.front() == '*') || num(p.total);
}

/// The boundary parameter of a multipart content type; empty if none.
std::string boundary_of(const std::string& content_type) {
  auto lc = lower(content_type);
  if (lc.rfind("multipart/byteranges", 0) != 0)
    return {};
  auto at = lc.find("boundary=");
  if (at == std::string::npos)
    return {};
  auto v = content_type.substr(at + 9);
  if (!v.empty() && v.front() == '"') {
    auto end = v.find('"', 1);
    return end == std::string::npos ? std::string() : v.substr(1, end - 1);
  }
  return v.substr(0, v.find_first_of("; \t"));
}

expected<std::vector<part>> parse_parts(const std::string& body, const std::string& boundary) {
  std::vector<part> parts;
  const std::string delim = "--" + boundary;
  size_t pos = body.find(delim);
  while (true) {
    if (pos == std::string::npos)
      return invalid_argument("multipart answer: a part's boundary is missing");
    pos += delim.size();
    if (body.compare(pos, 2, "--") == 0)
      return parts;  // the closing delimiter
    auto head_end = body.find("\r\n\r\n", pos);
    if (head_end == std::string::npos)
      return invalid_argument("multipart answer: a part's headers do not end");
    part p;
    bool ranged = false;
    for (size_t line = body.find("\r\n", pos); line < head_end;) {
      size_t next = body.find("\r\n", line + 2);
      std::string_view h(body.data() + line + 2, next - line - 2);
      auto colon = h.find(':');
      if (colon != std::string_view::npos && lower(h.substr(0, colon)) == "content-range") {
        if (!parse_content_range(h.substr(colon + 1), p))
          return invalid_argument("multipart answer: malformed Content-Range '" + std::string(h) +
                                  "'");
        ranged = true;
      }
      line = next;
    }
    if (!ranged)
      return invalid_argument("multipart answer: a part has no Content-Range");
    size_t data = head_end + 4, len = size_t(p.last - p.first + 1);
    if (body.size() - data < len)
      return invalid_argument("multipart answer: a part is cut short");
    p.data = std::string_view(body.data() + data, len);
    parts.push_back(p);
    pos = body.find(delim, data + len);
  }
}

} // namespace

std::string range_header_value(const std::vector<byte_range>& ranges) {
  std::string v = "bytes=";
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i)
      v += ',';
    v += std::to_string(ranges[i].offset) + "-" +
         std::to_string(ranges[i].offset + ranges[i].len - 1);
  }
  return v;
}

expected<std::vector<std::string>> split_byteranges(const std::string& body,
                                                    const std::string& content_type,
                                                    const std::string& content_range,
                                                    const std::vector<byte_range>& ranges) {
  std::vector<part> parts;
  if (auto boundary = boundary_of(content_type); !boundary.empty()) {
    auto got = parse_parts(body, boundary);
    if (!got)
      return got.err();
    parts = std::move(*got);
  } else {
    part p;
    if (!parse_content_range(content_range, p))
      return invalid_argument("range answer: neither multipart nor a Content-Range ('" +
                              content_type + "', '" + content_range + "')");
    if (body.size() != p.last - p.first + 1)
      return invalid_argument("range answer: its body is not its Content-Range's length");
    p.data = body;
    parts.push_back(p);
  }
  std::vector<std::string> out;
  out.reserve(ranges.size());
  for (const auto& r : ranges) {
    const uint64_t end = r.offset + r.len;  // exclusive
    auto it = std::find_if(parts.begin(), parts.end(), [&](const part& p) {
      // Covers the range, or all of it the blob has (short at its end).
      return p.first <= r.offset && (p.last + 1 >= end || p.last + 1 == p.total) &&
             r.offset <= p.last;
    });
    if (it == parts.end())
      return invalid_argument("range answer lacks bytes " + std::to_string(r.offset) + "-" +
                              std::to_string(end - 1));
    auto from = size_t(r.offset - it->first);
    out.emplace_back(it->data.substr(from, std::min<size_t>(r.len, it->data.size() - from)));
  }
  return out;
}

} // namespace dsec::registry
