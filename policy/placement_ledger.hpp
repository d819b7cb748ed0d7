// The creates this node sent to each member since that member's last load
// report: the `placed` term of placement::score(), so a burst spreads before
// the reports catch up. The placement actor and the scale-unit simulation
// (bench/gossip/scale_unit.cpp) keep it the same way: count every attempt
// sent, and forget a member's count when a new view carries a changed report
// from it (that report already counts what we sent).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace dsec::placement {

class ledger {
 public:
  /// A create attempt went to `node`.
  void sent(const std::string& node) { ++counts_[node]; }

  /// `view` replaces `old`: members whose report changed (sandboxes or
  /// creating), and members new to the view, start again from zero.
  void on_view(const std::vector<member_info>& old, const std::vector<member_info>& view);

  /// Per member id; what plan() takes as `placed`.
  const std::map<std::string, int64_t>& counts() const { return counts_; }

 private:
  std::map<std::string, int64_t> counts_;
};

} // namespace dsec::placement
