// Route table of the REST API (DESIGN.md §4).
#include "api/gateway_routes.hpp"

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

namespace {

/// One REST route: a method and a path pattern whose `{id}` segment is a
/// sandbox id (percent-decoded) and `{pid}` a process id (digits). Adding a
/// route is adding a row; the unit test walks this table.
struct route_row {
  std::string_view method;
  std::string_view pattern;
  route::kind_t kind;
};

constexpr route_row route_table[] = {
  {"GET", "/healthz", route::healthz},
  {"GET", "/metrics", route::metrics},
  {"GET", "/v1/layers", route::list_layers},
  {"GET", "/v1/nodes", route::list_nodes},
  {"POST", "/v1/fncall", route::fncall},
  {"POST", "/v1/sandboxes:batch", route::create_batch},
  {"POST", "/v1/sandboxes:pause", route::pause_job},
  {"POST", "/v1/sandboxes:resume", route::resume_job},
  {"POST", "/v1/sandboxes", route::create},
  {"GET", "/v1/sandboxes", route::list_sandboxes},
  {"GET", "/v1/sandboxes/{id}", route::get_sandbox},
  {"DELETE", "/v1/sandboxes/{id}", route::delete_sandbox},
  {"PATCH", "/v1/sandboxes/{id}", route::update_sandbox},
  {"POST", "/v1/sandboxes/{id}/exec", route::exec},
  {"PUT", "/v1/sandboxes/{id}/files", route::put_file},
  {"GET", "/v1/sandboxes/{id}/files", route::get_file},
  {"POST", "/v1/sandboxes/{id}/pause", route::pause},
  {"POST", "/v1/sandboxes/{id}/resume", route::resume},
  {"POST", "/v1/sandboxes/{id}/snapshot", route::snapshot},
  {"PUT", "/v1/sandboxes/{id}/network", route::set_network},
  {"GET", "/v1/sandboxes/{id}/trajectory", route::trajectory},
  {"POST", "/v1/sandboxes/{id}/replay", route::replay},
  {"GET", "/v1/sandboxes/{id}/metrics", route::sandbox_metrics},
  {"GET", "/v1/sandboxes/{id}/processes", route::list_processes},
  {"GET", "/v1/sandboxes/{id}/processes/{pid}", route::get_process},
  {"DELETE", "/v1/sandboxes/{id}/processes/{pid}", route::kill_process},
  {"POST", "/v1/sandboxes/{id}/processes/{pid}/kill", route::kill_process},
  // Terminals (issue 26 part 1; actors/gateway_pty.hpp).
  {"POST", "/v1/sandboxes/{id}/pty", route::pty_open},
  {"GET", "/v1/sandboxes/{id}/pty", route::pty_open},
  {"GET", "/v1/sandboxes/{id}/pty/{pid}", route::pty_get},
  {"POST", "/v1/sandboxes/{id}/pty/{pid}/input", route::pty_input},
  {"POST", "/v1/sandboxes/{id}/pty/{pid}/resize", route::pty_resize},
  {"POST", "/v1/sandboxes/{id}/pty/{pid}/kill", route::pty_kill},
  {"POST", "/v1/sandboxes/{id}/sessions", route::session_open},
  {"GET", "/v1/sandboxes/{id}/sessions", route::session_list},
  {"POST", "/v1/sandboxes/{id}/sessions/{sid}/run", route::session_run},
  {"DELETE", "/v1/sandboxes/{id}/sessions/{sid}", route::session_close},
};

/// Whether `seg` has the shape of `pattern` (placeholders match any segment).
bool same_shape(const std::vector<std::string_view>& seg, std::string_view pattern) {
  auto pat = split_path(pattern);
  if (pat.size() != seg.size())
    return false;
  for (size_t i = 0; i < pat.size(); ++i)
    if (pat[i].front() != '{' && pat[i] != seg[i])
      return false;
  return true;
}

/// Fills `r`'s placeholders from a path of `pattern`'s shape.
status bind_placeholders(const std::vector<std::string_view>& seg, std::string_view pattern,
                         route& r) {
  auto pat = split_path(pattern);
  for (size_t i = 0; i < pat.size(); ++i) {
    if (pat[i] == "{id}") {
      auto id = url_decode(seg[i]);
      if (!id)
        return invalid_argument("sandbox id: invalid percent-encoding");
      r.id = std::move(*id);
    } else if (pat[i] == "{pid}") {
      auto p = seg[i];
      if (p.empty() || p.size() > 9 || p.find_first_not_of("0123456789") != std::string_view::npos)
        return invalid_argument("pid: must be a positive integer, got \"" + std::string{p} + "\"");
      r.pid = static_cast<int32_t>(std::stol(std::string{p}));
    } else if (pat[i] == "{sid}") {
      auto sid = url_decode(seg[i]);
      if (!sid || sid->empty() || sid->size() > 64)
        return invalid_argument("session id: must be 1-64 bytes, percent-encoded");
      r.session = std::move(*sid);
    }
  }
  return {};
}

} // namespace

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
  const route_row* shape = nullptr;
  for (auto& row : route_table) {
    if (!same_shape(seg, row.pattern))
      continue;
    shape = &row;
    if (row.method != method)
      continue;
    if (auto st = bind_placeholders(seg, row.pattern, r); !st)
      return st.err();
    r.kind = row.kind;
    // Push streams (issue 24 part 2): the follow form of a process GET.
    if (auto f = r.query.find("follow"); r.kind == route::get_process && f != r.query.end()
                                         && (f->second == "1" || f->second == "true"))
      r.kind = route::follow_process;
    return r;
  }
  if (!shape)
    return not_found("no route for " + std::string{method} + " " + std::string{path});
  // The path is known: its placeholders are still checked before the method.
  if (auto st = bind_placeholders(seg, shape->pattern, r); !st)
    return st.err();
  method_not_allowed = true;
  return invalid_argument("method " + std::string{method} + " is not allowed on "
                          + std::string{path});
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
