// The port dialer (issue 26 part 3): one thread that opens upstream
// connections for ports (actors/gateway_ports.hpp, actors/http_relay.hpp).
// A container's socket is made inside its network namespace (the thread
// enters it for a moment) and a name lookup may block; neither may run on
// the HTTP server's Asio thread or a CAF scheduler thread. Jobs are short
// and run in order. The thread ends with the process.
#pragma once

#include <functional>

namespace dsec::ports {

/// Runs `job` on the dialer thread.
void post_dial(std::function<void()> job);

} // namespace dsec::ports
