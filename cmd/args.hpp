// Argument parsing shared by the CLI commands: `--flag value`, `--flag=value`,
// repeated flags, positionals and `--` (everything after it is positional).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::cli {

/// Parsed command line of one subcommand.
struct args {
  std::multimap<std::string, std::string> flags;
  std::vector<std::string> positional;

  /// Last value of `name`, or `fallback`.
  std::string get(const std::string& name, const std::string& fallback = "") const;
  /// All values of a repeated flag, in order.
  std::vector<std::string> all(const std::string& name) const;
  bool has(const std::string& name) const { return flags.count(name) > 0; }
};

/// Parses `words`. `value_flags` take a value, `bool_flags` do not; any other
/// `--x` is a usage error naming it. Positionals after the first one are kept
/// verbatim when `stop_at_second_positional` (so `exec ID ls -l` works).
expected<args> parse_args(const std::vector<std::string>& words,
                          const std::set<std::string>& value_flags,
                          const std::set<std::string>& bool_flags,
                          bool stop_at_second_positional = false);

/// Parses a whole number flag value, naming the flag on error.
expected<long long> to_int(const std::string& flag, const std::string& value);
/// Parses a decimal flag value, naming the flag on error.
expected<double> to_double(const std::string& flag, const std::string& value);

} // namespace dsec::cli
