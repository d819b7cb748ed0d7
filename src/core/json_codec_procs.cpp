// JSON of the process routes: background commands, the process table and
// kill requests (declared in json_codec.hpp). Split from json_codec.cpp by
// subject; output strings that are not UTF-8 get U+FFFD replacements.
#include <cctype>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/json_codec.hpp"
#include "core/json_codec_fields.hpp"

namespace dsec::json_codec {

using nlohmann::json;

namespace {

/// What a user typed: the shell string of {"/bin/sh","-c",X}, else argv
/// joined by spaces.
std::string command_line(const std::vector<std::string>& argv) {
  if (argv.size() == 3 && argv[0] == "/bin/sh" && argv[1] == "-c")
    return argv[2];
  std::string out;
  for (auto& a : argv)
    out += (out.empty() ? "" : " ") + a;
  return out;
}

struct signal_name {
  const char* name;
  int32_t number;
};

// Linux x86-64 and arm64 numbers.
constexpr signal_name signal_names[] = {
  {"HUP", 1},   {"INT", 2},    {"QUIT", 3},  {"ILL", 4},    {"TRAP", 5},  {"ABRT", 6},
  {"BUS", 7},   {"FPE", 8},    {"KILL", 9},  {"USR1", 10},  {"SEGV", 11}, {"USR2", 12},
  {"PIPE", 13}, {"ALRM", 14},  {"TERM", 15}, {"STKFLT", 16}, {"CHLD", 17}, {"CONT", 18},
  {"STOP", 19}, {"TSTP", 20},  {"TTIN", 21}, {"TTOU", 22},  {"URG", 23},  {"XCPU", 24},
  {"XFSZ", 25}, {"VTALRM", 26}, {"PROF", 27}, {"WINCH", 28}, {"IO", 29},  {"PWR", 30},
  {"SYS", 31},
};

constexpr int32_t max_signal = 64;

error bad_signal(std::string_view got) {
  return invalid_argument("signal: must be a number between 1 and 64 or a name such as "
                          "\"SIGTERM\", got \"" + std::string{got.substr(0, 64)} + "\"");
}

} // namespace

std::string encode(const background_process& p) {
  json j = {{"pid", p.pid},
            {"cmd", command_line(p.argv)},
            {"argv", p.argv},
            {"started_at", p.started_at_ms / 1000.0},
            {"state", p.running ? "running" : "exited"},
            {"exit_code", p.running ? json(nullptr) : json(p.result.exit_code)},
            {"stdout", p.result.stdout_data},
            {"stderr", p.result.stderr_data},
            {"timed_out", p.result.timed_out},
            {"truncated", p.result.truncated},
            {"duration_ms", p.result.duration_ms}};
  return dump(j);
}

std::string encode(const std::vector<process_info>& list) {
  json arr = json::array();
  for (auto& p : list)
    arr.push_back({{"pid", p.pid},
                   {"ppid", p.ppid},
                   {"cmd", p.argv.empty() ? "[" + p.name + "]" : command_line(p.argv)},
                   {"argv", p.argv},
                   {"name", p.name},
                   {"state", p.state},
                   {"started_at", p.started_at_ms / 1000.0},
                   {"background", p.background}});
  return dump(json{{"processes", std::move(arr)}});
}

expected<int32_t> parse_signal_value(std::string_view text) {
  if (text.empty())
    return bad_signal(text);
  if (text.find_first_not_of("0123456789") == std::string_view::npos) {
    if (text.size() > 3)
      return bad_signal(text);
    int32_t n = std::atoi(std::string{text}.c_str());
    if (n < 1 || n > max_signal)
      return bad_signal(text);
    return n;
  }
  std::string name{text};
  for (auto& c : name)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.rfind("SIG", 0) == 0)
    name.erase(0, 3);
  for (auto& s : signal_names)
    if (name == s.name)
      return s.number;
  return bad_signal(text);
}

expected<int32_t> parse_kill(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return 9;
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("kill: body must be a JSON object such as {\"signal\": 15}");
  for (auto& [k, v] : j.items())
    if (k != "signal")
      return invalid_argument("kill: unknown field \"" + k + "\"");
  auto it = j.find("signal");
  if (it == j.end() || it->is_null())
    return 9;
  if (it->is_number_integer())
    return parse_signal_value(std::to_string(it->get<int64_t>()));
  if (it->is_string())
    return parse_signal_value(it->get<std::string>());
  return bad_signal(it->dump());
}

expected<background_process> decode_background(std::string_view body) {
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pid"))
    return internal_error("background exec: unexpected answer: "
                          + std::string{body.substr(0, 200)});
  background_process p;
  p.pid = j.value("pid", 0);
  p.argv = j.value("argv", std::vector<std::string>{});
  p.started_at_ms = static_cast<int64_t>(j.value("started_at", 0.0) * 1000);
  p.running = j.value("state", std::string{"running"}) == "running";
  if (!p.running && j.contains("exit_code") && j["exit_code"].is_number())
    p.result.exit_code = j["exit_code"].get<int32_t>();
  p.result.stdout_data = j.value("stdout", std::string{});
  p.result.stderr_data = j.value("stderr", std::string{});
  p.result.timed_out = j.value("timed_out", false);
  p.result.truncated = j.value("truncated", false);
  p.result.duration_ms = j.value("duration_ms", 0.0);
  return p;
}

} // namespace dsec::json_codec
