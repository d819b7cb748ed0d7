// `dsec node` flag parsing.
#include "cli/node_cmd.hpp"

#include <iostream>

#include "actors/node.hpp"
#include "cli/args.hpp"

namespace dsec::cli {

int run_node_command(const std::vector<std::string>& words) {
  const char* text = "dsec node [--state-dir DIR] [--rest HOST:PORT] [--listen HOST:PORT] "
                     "[--node-id ID] [--join HOST:PORT,...] [--store DIR] [--max-sandboxes N]";
  auto a = parse_args(words,
                      {"state-dir", "rest", "listen", "node-id", "join", "store", "max-sandboxes"},
                      {});
  if (!a || !a->positional.empty()) {
    std::cerr << "dsec node: " << (a ? "unexpected argument " + a->positional[0] : a.err().message)
              << "\nusage: " << text << "\n";
    return 2;
  }
  node_config cfg;
  cfg.state_dir = a->get("state-dir", cfg.state_dir);
  cfg.rest = a->get("rest", cfg.rest);
  cfg.listen = a->get("listen", cfg.listen);
  cfg.node_id = a->get("node-id");
  cfg.store_dir = a->get("store");
  if (a->has("max-sandboxes")) {
    auto n = to_int("max-sandboxes", a->get("max-sandboxes"));
    if (!n || *n < 1) {
      std::cerr << "dsec node: --max-sandboxes must be a positive whole number\n";
      return 2;
    }
    cfg.max_sandboxes = static_cast<size_t>(*n);
  }
  if (a->has("join")) {
    std::cerr << "dsec node: --join: clustering is not available in this build; "
                 "run a single node\n";
    return 2;
  }
  if (cfg.state_dir.empty() || cfg.state_dir[0] != '/') {
    std::cerr << "dsec node: --state-dir must be an absolute path\n";
    return 2;
  }
  return run_node(std::move(cfg));
}

} // namespace dsec::cli
