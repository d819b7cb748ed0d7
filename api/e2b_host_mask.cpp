// E2B's maskRequestHost on create (e2b_host_mask.hpp).
#include "api/e2b_host_mask.hpp"

#include <nlohmann/json.hpp>

#include "core/host_mask.hpp"

namespace dsec::e2b {

expected<std::string> host_mask_of_create(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return std::string{}; // parse_create reports the body itself
  auto net = j.find("network");
  if (net == j.end() || !net->is_object())
    return std::string{}; // apply_create_options reports a network that is no object
  auto m = net->find("maskRequestHost");
  if (m == net->end() || m->is_null())
    return std::string{};
  if (!m->is_string())
    return invalid_argument("create sandbox: network.maskRequestHost must be a string");
  auto mask = m->get<std::string>();
  if (auto st = check_host_mask(mask, "create sandbox: network.maskRequestHost"); !st)
    return st.err();
  return mask;
}

} // namespace dsec::e2b
