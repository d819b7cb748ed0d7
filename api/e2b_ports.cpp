// E2B's create option and answer fields for ports (see e2b_ports.hpp).
#include "api/e2b_ports.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <random>

#include <nlohmann/json.hpp>

#include "api/e2b_codec.hpp"
#include "core/host_mask.hpp"
#include "core/port_route.hpp"

namespace dsec::e2b {

namespace {

using json = nlohmann::json;

/// 128 random bits as hex, from the kernel's generator.
std::string random_token() {
  unsigned char bytes[16];
  std::random_device rd; // getrandom(2) on Linux
  for (auto& b : bytes)
    b = static_cast<unsigned char>(rd());
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (auto b : bytes)
    out += hex[b >> 4], out += hex[b & 15];
  return out;
}

} // namespace

expected<std::string> traffic_token_of_create(std::string_view body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return std::string{}; // parse_create reports the body itself
  auto net = j.find("network");
  if (net == j.end() || net->is_null())
    return std::string{};
  if (!net->is_object())
    return invalid_argument("create sandbox: network must be an object");
  auto pub = net->find("allowPublicTraffic");
  if (pub == net->end() || pub->is_null())
    return std::string{};
  if (!pub->is_boolean())
    return invalid_argument("create sandbox: network.allowPublicTraffic must be a boolean");
  return pub->get<bool>() ? std::string{} : random_token();
}

std::string encode_sandbox(const sandbox_info& info, const std::string& access_token,
                           const std::string& domain) {
  auto j = json::parse(encode_sandbox(info, access_token));
  if (!domain.empty())
    j["domain"] = domain;
  if (auto it = info.labels.find(traffic_token_label); it != info.labels.end())
    j["trafficAccessToken"] = it->second;
  if (auto md = j.find("metadata"); md != j.end() && md->is_object()) {
    md->erase(traffic_token_label);
    md->erase(public_ports_label);
    md->erase(host_mask_label);
  }
  // network.maskRequestHost as E2B's getInfo shows it (core/host_mask.hpp).
  if (auto it = info.labels.find(host_mask_label); it != info.labels.end())
    j["network"]["maskRequestHost"] = it->second;
  return j.dump();
}

} // namespace dsec::e2b
