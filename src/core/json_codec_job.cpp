// JSON of the job-level operations (see job.hpp), split from json_codec.cpp
// by subject.
#include <nlohmann/json.hpp>

#include "core/error_kind.hpp"
#include "core/job.hpp"

namespace dsec::json_codec {

using nlohmann::json;

expected<std::map<std::string, std::string>> parse_job(std::string_view body,
                                                       std::string_view op) {
  std::string what{op};
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded())
    return invalid_argument(what + ": body is not valid JSON");
  if (!j.is_object())
    return invalid_argument(what + R"(: body must be a JSON object {"labels": {"k": "v"}})");
  for (auto& [k, v] : j.items())
    if (k != "labels")
      return invalid_argument(what + ": unknown field \"" + k + "\"");
  std::map<std::string, std::string> labels;
  auto it = j.find("labels");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_object())
      return invalid_argument(what + ": labels must be an object of strings");
    if (it->size() > 64)
      return too_large(what + ": labels: more than 64 entries");
    for (auto& [k, v] : it->items()) {
      if (!v.is_string())
        return invalid_argument(what + ": labels." + k + " must be a string");
      labels[k] = v.get<std::string>();
    }
  }
  if (auto st = validate_job_labels(labels, op); !st)
    return st.err();
  return labels;
}

std::string encode_job(std::string_view action, const std::map<std::string, std::string>& labels,
                       const job_result& r) {
  json errors = json::array();
  for (auto& e : r.errors) {
    error err{e.code, e.message};
    errors.push_back({{"id", e.id.empty() ? json(nullptr) : json(e.id)},
                      {"node", e.node},
                      {"code", to_string(e.code)},
                      {"message", e.message},
                      {"infra", is_infra(err)}});
  }
  return json{{"action", action},
              {"labels", labels},
              {"done", r.done},
              {"count", r.done.size()},
              {"errors", std::move(errors)}}
    .dump(-1, ' ', false, json::error_handler_t::replace);
}

expected<job_result> decode_job(std::string_view body) {
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return internal_error("job answer: not a JSON object");
  job_result r;
  try {
    for (auto& id : j.value("done", json::array()))
      r.done.push_back(id.get<std::string>());
    for (auto& e : j.value("errors", json::array())) {
      job_item_error item;
      if (auto id = e.find("id"); id != e.end() && id->is_string())
        item.id = id->get<std::string>();
      item.node = e.value("node", "");
      item.code = errc_from_string(e.value("code", "internal"));
      item.message = e.value("message", "");
      r.errors.push_back(std::move(item));
    }
  } catch (const json::exception& ex) {
    return internal_error(std::string{"job answer: "} + ex.what());
  }
  return r;
}

} // namespace dsec::json_codec
