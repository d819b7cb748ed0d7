// JSON of the shell session routes (see json_codec_session.hpp).
#include "core/json_codec_session.hpp"

#include <nlohmann/json.hpp>

#include "core/json_codec_fields.hpp"
#include "core/types.hpp"

namespace dsec::json_codec {

using nlohmann::json;

namespace {

json to_json(const session_info& s) {
  return {{"id", s.id},   {"shell", s.shell},   {"alive", s.alive},
          {"runs", s.runs}, {"created_at", s.created_at_ms / 1000.0}, {"reason", s.reason}};
}

} // namespace

expected<session_open_body> parse_session_open(std::string_view body) {
  session_open_body out;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return out; // no body: all defaults
  auto j = parse_object(body, "session open");
  if (!j)
    return j.err();
  if (auto st = reject_unknown(*j, {"shell", "cwd", "env"}, "session open"); !st)
    return st.err();
  status st;
  if (!(st = get_string(*j, "shell", out.shell)) || !(st = get_string(*j, "cwd", out.cwd))
      || !(st = get_string_map(*j, "env", out.env, spec_limits::max_env)))
    return st.err();
  return out;
}

expected<session_run_body> parse_session_run(std::string_view body) {
  auto j = parse_object(body, "session run");
  if (!j)
    return j.err();
  if (auto st = reject_unknown(*j, {"cmd", "timeout_s"}, "session run"); !st)
    return st.err();
  session_run_body out;
  auto it = j->find("cmd");
  if (it == j->end() || !it->is_string())
    return bad("cmd", "is required: the command line the session's shell runs (a string)");
  out.cmd = it->get<std::string>();
  if (out.cmd.empty())
    return bad("cmd", "must not be empty");
  if (auto why = session_text::check_cmd(out.cmd); !why.empty())
    return error{out.cmd.size() > session_text::max_cmd ? errc::too_large : errc::invalid_argument,
                 "cmd: " + why};
  if (auto st = get_double(*j, "timeout_s", out.timeout_s, 0, 7 * 24 * 3600.0); !st)
    return st.err();
  return out;
}

std::string encode(const session_info& s) { return dump(to_json(s)); }

std::string encode(const std::vector<session_info>& list) {
  json arr = json::array();
  for (auto& s : list)
    arr.push_back(to_json(s));
  return dump(json{{"sessions", std::move(arr)}});
}

} // namespace dsec::json_codec
