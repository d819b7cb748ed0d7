// The entry point of `dsec bench`: main passes the arguments after "bench".
// Everything else in bench/ is reachable only through this function, so main
// and the tests link one static library (dsec_bench) and call one function.
#pragma once

#include <string>
#include <vector>

namespace dsec::bench {

/// Runs `dsec bench <args…>`, e.g. {"burst", "--count", "100"}. Prints the JSON
/// report on stdout (and to --out), progress on stderr. Returns the process
/// exit code: 0 done, 1 the node is unreachable or no system could be
/// measured, 2 bad usage.
int run_bench_command(const std::vector<std::string>& args);

} // namespace dsec::bench
