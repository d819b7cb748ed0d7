// The memberlist's view as member_info values (see member_view.hpp).
#include "gossip/member_view.hpp"

namespace dsec::gossip {

std::vector<member_info> to_member_infos(const std::vector<member>& members) {
  std::vector<member_info> out;
  out.reserve(members.size());
  for (auto& m : members) {
    member_info i;
    i.id = m.id;
    i.address = m.address;
    i.state = to_string(m.state);
    i.incarnation = m.incarnation;
    i.free_memory_mb = static_cast<int64_t>(m.load.free_memory_mb);
    i.cpu_load = m.load.cpu_load;
    i.sandboxes = m.load.sandboxes;
    i.creating = m.load.creating;
    i.accepting = m.load.accepting;
    // Keeps the "egress-sources:<digest>" entry: GET /v1/nodes shows it
    // apart (core/json_codec_encode.cpp encode_nodes).
    i.layers = m.load.layers;
    out.push_back(std::move(i));
  }
  return out;
}

} // namespace dsec::gossip
