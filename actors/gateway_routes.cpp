// Route table of the REST API (DESIGN.md §4).
#include "actors/gateway_routes.hpp"

namespace dsec {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

status parse_query(std::string_view q, route& r) {
  auto items = query_items(q);
  if (!items)
    return items.err();
  for (auto& [key, val] : *items) {
    if (key == "label") {
      auto leq = val.find('=');
      if (leq == std::string::npos || leq == 0)
        return invalid_argument("query: label must be key=value, got \"" + val + "\"");
      r.labels[val.substr(0, leq)] = val.substr(leq + 1);
    } else {
      r.query[key] = val;
    }
  }
  return {};
}

} // namespace

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < path.size()) {
    auto next = path.find('/', pos);
    if (next == std::string_view::npos)
      next = path.size();
    if (next > pos)
      out.push_back(path.substr(pos, next - pos));
    pos = next + 1;
  }
  return out;
}

expected<std::vector<std::pair<std::string, std::string>>> query_items(std::string_view q) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0;
  while (pos < q.size()) {
    auto amp = q.find('&', pos);
    if (amp == std::string_view::npos)
      amp = q.size();
    auto item = q.substr(pos, amp - pos);
    pos = amp + 1;
    if (item.empty())
      continue;
    auto eq = item.find('=');
    auto key = url_decode(item.substr(0, eq));
    auto val = url_decode(eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1));
    if (!key || !val)
      return invalid_argument("query: invalid percent-encoding in \"" + std::string{item} + "\"");
    out.emplace_back(std::move(*key), std::move(*val));
  }
  return out;
}

expected<std::string> url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    int hi = i + 1 < s.size() ? hex_value(s[i + 1]) : -1;
    int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
    if (hi < 0 || lo < 0)
      return invalid_argument("bad escape");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

expected<route> parse_route(std::string_view method, std::string_view target,
                            bool& method_not_allowed) {
  method_not_allowed = false;
  route r;
  auto qpos = target.find('?');
  auto path = target.substr(0, qpos);
  if (qpos != std::string_view::npos)
    if (auto st = parse_query(target.substr(qpos + 1), r); !st)
      return st.err();
  auto seg = split_path(path);
  auto want = [&](std::string_view m, route::kind_t k) {
    if (method == m) {
      r.kind = k;
      return true;
    }
    return false;
  };
  auto not_allowed = [&]() -> expected<route> {
    method_not_allowed = true;
    return invalid_argument("method " + std::string{method} + " is not allowed on "
                            + std::string{path});
  };
  if (seg.size() == 1 && seg[0] == "healthz")
    return want("GET", route::healthz) ? expected<route>{r} : not_allowed();
  if (seg.size() == 1 && seg[0] == "metrics")
    return want("GET", route::metrics) ? expected<route>{r} : not_allowed();
  if (seg.size() >= 2 && seg[0] == "v1") {
    if (seg.size() == 2 && seg[1] == "layers")
      return want("GET", route::list_layers) ? expected<route>{r} : not_allowed();
    if (seg.size() == 2 && seg[1] == "nodes")
      return want("GET", route::list_nodes) ? expected<route>{r} : not_allowed();
    if (seg.size() == 2 && seg[1] == "fncall")
      return want("POST", route::fncall) ? expected<route>{r} : not_allowed();
    if (seg.size() == 2 && seg[1] == "sandboxes:batch")
      return want("POST", route::create_batch) ? expected<route>{r} : not_allowed();
    if (seg.size() == 2 && seg[1] == "sandboxes:pause")
      return want("POST", route::pause_job) ? expected<route>{r} : not_allowed();
    if (seg.size() == 2 && seg[1] == "sandboxes:resume")
      return want("POST", route::resume_job) ? expected<route>{r} : not_allowed();
    if (seg.size() == 2 && seg[1] == "sandboxes")
      return want("POST", route::create) || want("GET", route::list_sandboxes)
               ? expected<route>{r}
               : not_allowed();
    if (seg.size() >= 3 && seg[1] == "sandboxes") {
      auto id = url_decode(seg[2]);
      if (!id)
        return invalid_argument("sandbox id: invalid percent-encoding");
      r.id = *id;
      if (seg.size() == 3)
        return want("GET", route::get_sandbox) || want("DELETE", route::delete_sandbox)
                   || want("PATCH", route::update_sandbox)
                 ? expected<route>{r}
                 : not_allowed();
      if (seg.size() == 4 && seg[3] == "exec")
        return want("POST", route::exec) ? expected<route>{r} : not_allowed();
      if (seg.size() == 4 && seg[3] == "files")
        return want("PUT", route::put_file) || want("GET", route::get_file)
                 ? expected<route>{r}
                 : not_allowed();
      if (seg.size() == 4 && seg[3] == "pause")
        return want("POST", route::pause) ? expected<route>{r} : not_allowed();
      if (seg.size() == 4 && seg[3] == "resume")
        return want("POST", route::resume) ? expected<route>{r} : not_allowed();
      if (seg.size() == 4 && seg[3] == "snapshot")
        return want("POST", route::snapshot) ? expected<route>{r} : not_allowed();
      if (seg.size() == 4 && seg[3] == "network")
        return want("PUT", route::set_network) ? expected<route>{r} : not_allowed();
      if (seg.size() == 4 && seg[3] == "trajectory")
        return want("GET", route::trajectory) ? expected<route>{r} : not_allowed();
      if (seg.size() == 4 && seg[3] == "replay")
        return want("POST", route::replay) ? expected<route>{r} : not_allowed();
      if (seg.size() == 4 && seg[3] == "processes")
        return want("GET", route::list_processes) ? expected<route>{r} : not_allowed();
      if (seg.size() >= 5 && seg.size() <= 6 && seg[3] == "processes") {
        auto p = seg[4];
        if (p.empty() || p.size() > 9 || p.find_first_not_of("0123456789") != std::string_view::npos)
          return invalid_argument("pid: must be a positive integer, got \"" + std::string{p} + "\"");
        r.pid = static_cast<int32_t>(std::stol(std::string{p}));
        if (seg.size() == 5) {
          if (!(want("GET", route::get_process) || want("DELETE", route::kill_process)))
            return not_allowed();
          // Push streams (issue 24 part 2): the follow form of a GET.
          if (auto f = r.query.find("follow"); r.kind == route::get_process
                                               && f != r.query.end()
                                               && (f->second == "1" || f->second == "true"))
            r.kind = route::follow_process;
          return r;
        }
        if (seg[5] == "kill")
          return want("POST", route::kill_process) ? expected<route>{r} : not_allowed();
      }
    }
  }
  return not_found("no route for " + std::string{method} + " " + std::string{path});
}

int http_status_of(errc code) {
  switch (code) {
    case errc::none: return 200;
    case errc::invalid_argument: return 400;
    case errc::not_found: return 404;
    case errc::conflict: return 409;
    case errc::too_large: return 413;
    case errc::resource_exhausted: return 429;
    case errc::unavailable: return 503;
    case errc::timeout: return 504;
    case errc::internal: return 500;
  }
  return 500;
}

} // namespace dsec
