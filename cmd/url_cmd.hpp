// `dsec url ID PORT`: the URL that reaches TCP PORT inside sandbox ID through
// the node's REST gateway (ports, issue 26 part 3; actors/gateway_ports.hpp).
#pragma once

#include <string>
#include <vector>

namespace dsec::cli {

/// True for "url".
bool is_url_command(const std::string& cmd);

/// Runs it; the exit code (0, 1 on a node error, 2 on usage).
int run_url_command(const std::string& cmd, const std::vector<std::string>& args);

} // namespace dsec::cli
