// `dsec create|exec|ls|get|rm|cp …`: the CLI against a running node's REST
// gateway (--rest HOST:PORT, or $DSEC_REST, default 127.0.0.1:7070).
#pragma once

#include <string>
#include <vector>

namespace dsec::cli {

/// Runs one client command; `cmd` is the subcommand name, `args` the words
/// after it. Returns the exit code (exec: the command's own exit code).
int run_client_command(const std::string& cmd, const std::vector<std::string>& args);

/// True for the subcommands run_client_command knows.
bool is_client_command(const std::string& cmd);

/// `dsec pause|resume` (job_cmd.cpp): by id, or a whole job by --label.
bool is_job_command(const std::string& cmd);
int run_job_command(const std::string& cmd, const std::vector<std::string>& args);

/// `dsec session open|run|close|list` (session_cmd.cpp; issue 26 part 2).
int run_session_command(const std::vector<std::string>& words);

} // namespace dsec::cli
