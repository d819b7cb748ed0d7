// E2B template builds across node restarts (e2b_template_builds.hpp).
#include "api/e2b_template_builds.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "sys/fs.hpp"

namespace dsec::e2b {

namespace {

using nlohmann::json;

constexpr int record_version = 1;

json encode_one(const template_build& b) {
  auto logs = json::array();
  size_t first = b.logs.size() > max_recorded_log_lines ? b.logs.size() - max_recorded_log_lines : 0;
  for (size_t i = first; i < b.logs.size(); ++i)
    logs.push_back({{"at", b.logs[i].at_ms}, {"level", b.logs[i].level},
                    {"message", b.logs[i].message}});
  json j = {{"templateID", b.template_name}, {"tags", b.tags},       {"cpuCount", b.cpu},
          {"memoryMB", b.memory_mb},       {"status", b.status},   {"reason", b.reason},
          {"step", b.step},                {"createdAt", b.created_at_ms}, {"logs", logs}};
  if (b.interrupted_at_load)
    j["stepsMayRun"] = true;
  return j;
}

bool known_status(const std::string& s) {
  return s == "waiting" || s == "building" || s == "ready" || s == "error";
}

} // namespace

std::string builds_record_path(const std::string& state_dir) {
  return state_dir + "/e2b_template_builds.json";
}

std::string encode_builds(const build_map& all) {
  // The newest max_recorded_builds, by request time.
  std::vector<const template_build*> order;
  for (auto& [id, b] : all)
    order.push_back(&b);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return a->created_at_ms > b->created_at_ms;
  });
  if (order.size() > max_recorded_builds)
    order.resize(max_recorded_builds);
  json builds = json::object();
  for (auto* b : order)
    builds[b->id] = encode_one(*b);
  json j = {{"version", record_version}, {"builds", builds}};
  return j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

expected<build_map> decode_builds(std::string_view text, const std::string& path) {
  auto corrupt = [&](const std::string& why) {
    return error{errc::internal, "E2B template builds record " + path + " is corrupt: " + why};
  };
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return corrupt("not a JSON object");
  if (j.value("version", 0) != record_version)
    return corrupt("version is not " + std::to_string(record_version));
  auto all = j.find("builds");
  if (all == j.end() || !all->is_object())
    return corrupt("no builds object");
  build_map out;
  for (auto& [id, v] : all->items()) {
    auto bad = [&](const char* field) {
      return corrupt("build " + id.substr(0, 64) + ": " + field);
    };
    if (!v.is_object())
      return bad("not an object");
    template_build b;
    b.id = id;
    try {
      b.template_name = v.at("templateID").get<std::string>();
      b.tags = v.at("tags").get<std::vector<std::string>>();
      b.cpu = v.value("cpuCount", 0.0);
      b.memory_mb = v.value("memoryMB", int64_t{0});
      b.status = v.at("status").get<std::string>();
      b.reason = v.value("reason", std::string{});
      b.step = v.value("step", std::string{});
      b.created_at_ms = v.value("createdAt", int64_t{0});
      b.interrupted_at_load = v.value("stepsMayRun", false);
      for (auto& l : v.at("logs"))
        b.logs.push_back({l.at("at").get<int64_t>(), l.at("level").get<std::string>(),
                          l.at("message").get<std::string>()});
    } catch (const json::exception& e) {
      return bad(e.what());
    }
    if (b.template_name.empty() || b.tags.empty())
      return bad("templateID and tags are required");
    if (!known_status(b.status))
      return bad("unknown status");
    if (b.status == "building") {
      b.status = "error";
      b.reason = interrupted_reason;
      b.interrupted_at_load = true;
      b.logs.push_back({b.logs.empty() ? b.created_at_ms : b.logs.back().at_ms, "error",
                        interrupted_reason});
    }
    out[id] = std::move(b);
  }
  return out;
}

expected<build_map> read_builds(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return build_map{}; // no build recorded yet
  std::stringstream ss;
  ss << in.rdbuf();
  return decode_builds(ss.str(), path);
}

status write_builds(const std::string& path, const std::string& text) {
  return sys::write_file_atomic(path, text, 0600, sys::durability::process_crash);
}

} // namespace dsec::e2b
