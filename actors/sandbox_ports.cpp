// The port operation of the sandbox actor (see sandbox_ports.hpp).
#include "actors/sandbox_ports.hpp"

#include <caf/all.hpp>

#include "actors/sandbox_ops.hpp"
#include "core/host_mask.hpp"
#include "core/host_port.hpp"
#include "core/port_route.hpp"

namespace dsec {

std::string reachable_rest(const node_config& cfg) {
  auto rest = parse_host_port(cfg.rest, true);
  if (!rest)
    return cfg.rest;
  auto host = rest->first;
  if (host == "0.0.0.0" || host == "::" || host.empty()) {
    auto adv = parse_host_port(cfg.advertise.empty() ? cfg.listen : cfg.advertise);
    host = adv ? adv->first : "127.0.0.1";
  }
  if (host.find(':') != std::string::npos)
    host = "[" + host + "]";
  return host + ":" + std::to_string(rest->second);
}

void route_port(sandbox_actor_ptr self, caf::response_promise rp, int32_t port) {
  if (!ready_for(self, rp,
                 [self, port](caf::response_promise rp) { route_port(self, std::move(rp), port); }))
    return;
  auto& st = self->state;
  port_route r;
  r.node = st.ctx->config.node_id;
  r.rest = reachable_rest(st.ctx->config);
  r.backend = st.spec.backend;
  if (auto it = st.spec.labels.find(traffic_token_label); it != st.spec.labels.end())
    r.traffic_token = it->second;
  if (auto it = st.spec.labels.find(public_ports_label); it != st.spec.labels.end())
    r.public_ports = it->second == "true";
  if (auto it = st.spec.labels.find(host_mask_label); it != st.spec.labels.end())
    r.host_mask = it->second;
  r.local = st.sb;
  r.actor = caf::actor_cast<caf::actor>(self);
  rp.deliver(std::move(r));
}

} // namespace dsec
