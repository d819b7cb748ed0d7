// PATCH /v1/sandboxes/{id}: the body that changes a running sandbox (its CPU
// class and network policy, together) and the answer saying what changed.
#include <nlohmann/json.hpp>

#include "core/json_codec.hpp"
#include "core/validate.hpp"

namespace dsec::json_codec {

using nlohmann::json;

expected<sandbox_update> parse_update(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return invalid_argument("update: the body is empty; send {\"cpu_class\": \"batch\"|\"latency\"}"
                            " and/or {\"network\": {...}}");
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("update: the body is not a JSON object");
  if (j.empty())
    return invalid_argument("update: nothing to change; send \"cpu_class\" and/or \"network\"");
  sandbox_update out;
  for (auto& [k, v] : j.items()) {
    if (k == "cpu_class") {
      if (!v.is_string())
        return invalid_argument("cpu_class: must be \"latency\" or \"batch\"");
      out.cpu_class = v.get<std::string>();
      if (auto st = validate_cpu_class(out.cpu_class); !st)
        return st.err();
    } else if (k == "network") {
      if (!v.is_object())
        return invalid_argument(R"(network: must be {"mode":"none"} or {"allow":[...]})");
      auto policy = parse_network_policy(v.dump());
      if (!policy)
        return policy.err();
      out.set_network = true;
      out.network = std::move(*policy);
    } else {
      return invalid_argument("update: unknown field \"" + k.substr(0, 200)
                              + "\" (known: cpu_class, network)");
    }
  }
  return out;
}

std::string encode_update(const sandbox_info& info, const sandbox_update& applied) {
  auto j = json::parse(encode(info), nullptr, false);
  json done = json::array();
  if (!applied.cpu_class.empty())
    done.push_back("cpu_class");
  if (applied.set_network)
    done.push_back("network");
  j["applied"] = std::move(done);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace dsec::json_codec
