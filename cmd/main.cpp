// dsec: one binary for the node, the CLI, the layer tools and the bench.
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "cmd/client_cmd.hpp"
#include "cmd/trajectory_cmd.hpp"
#include "cmd/url_cmd.hpp"
#include "cmd/layer_cmd.hpp"
#include "cmd/lazyfs_cmd.hpp"
#include "cmd/node_cmd.hpp"

namespace {

const char* usage_text =
  "dsec: sandboxes for agentic RL training and evaluation\n"
  "\n"
  "usage:\n"
  "  dsec node [--state-dir DIR] [--rest HOST:PORT] [--listen HOST:PORT] [--node-id ID] "
  "[--store DIR]\n"
  "  dsec layer build DIR --name N --version V [--kind base|workspace|toolkit] "
  "[--state-dir DIR | --store DIR]\n"
  "  dsec layer ls|defaults [--state-dir DIR | --store DIR]\n"
  "  dsec create [--image REGISTRY/REPO:TAG] [--layer REF ...] [--cpu N] [--memory-mb N] [--ttl-s N] [--label K=V ...] "
  "[--cpu-class latency|batch]\n"
  "  dsec exec ID [--cwd DIR] [--env K=V] [--timeout-s N] [--stdin FILE|-] [--background] "
  "[--] CMD [ARGS...]\n"
  "  dsec ps ID   dsec kill ID PID [--signal SIG]\n"
  "  dsec pty ID [--cmd CMD | --attach PID] [--cols N --rows N]\n"
  "  dsec update ID [--cpu-class latency|batch] [--allow HOST:PORT ... | --no-network]\n"
  "  dsec ls [--label K=V]   dsec get ID   dsec rm ID...   dsec cp SRC DST\n"
  "  dsec trajectory ID [--since SEQ] [--json]   dsec replay ID [--upto-seq SEQ]\n"
  "  dsec session open|run|close|list ...   (shell sessions; dsec session --help)\n"
  "  dsec url ID PORT [--domain DOMAIN]   (a port inside the sandbox, through the node)\n"
  "  dsec lazyfs --store DIR --cache DIR [--chunk-cache-mb N] [registry flags] | --stop | --stats\n"
  "  dsec bench burst [--rest HOST:PORT] [--count N] [--inflight N] [--out FILE]\n"
  "\n"
  "Client commands talk to --rest HOST:PORT (or $DSEC_REST, default 127.0.0.1:7070).\n";

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty() || words[0] == "help" || words[0] == "--help" || words[0] == "-h") {
    std::cout << usage_text;
    return words.empty() ? 2 : 0;
  }
  auto cmd = words[0];
  std::vector<std::string> rest(words.begin() + 1, words.end());
  if (cmd == "version" || cmd == "--version") {
    std::cout << "dsec 0.1.0\n";
    return 0;
  }
  if (cmd == "node")
    return dsec::cli::run_node_command(rest);
  if (cmd == "layer")
    return dsec::cli::run_layer_command(rest);
  if (cmd == "lazyfs")
    return dsec::cli::run_lazyfs_command(rest);
  if (cmd == "bench")
    return dsec::bench::run_bench_command(rest);
  if (dsec::cli::is_client_command(cmd))
    return dsec::cli::run_client_command(cmd, rest);
  if (dsec::cli::is_trajectory_command(cmd))
    return dsec::cli::run_trajectory_command(cmd, rest);
  if (dsec::cli::is_url_command(cmd))
    return dsec::cli::run_url_command(cmd, rest);
  std::cerr << "dsec: unknown command \"" << cmd << "\"\n" << usage_text;
  return 2;
}
