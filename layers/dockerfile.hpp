// The Dockerfile subset `dsec layer build --dockerfile` runs, as pure
// functions: the text is split into instructions (comments, `\` line
// continuations, the JSON exec form), then planned into steps against the
// build args and the base layer's exec defaults, with `$var`/`${var}`
// substitution where Docker does it (FROM, COPY, ADD, ENV, WORKDIR, USER,
// ARG defaults; RUN is left to the shell, which gets ENV and ARG values in
// its environment).
//
// Supported: FROM (one; an image reference or a layer ref name@version),
// RUN (shell and exec form), COPY and ADD of local files and directories,
// ENV (`ENV k v` and `ENV k=v k2="v 2"`), WORKDIR, USER, ARG (defaults and
// --build-arg). Refused, naming the instruction and line: multi-stage
// (`FROM ... AS`, a second FROM), flags of FROM/RUN/COPY/ADD (--chown,
// --chmod, --from, --link, --mount, --network, --platform), ADD of a URL,
// wildcards in sources, SHELL (it would change how RUN runs), VOLUME (its
// content rules would differ), ONBUILD, an `escape` directive, anything
// unknown. Recorded with a warning and otherwise without effect (a dsec
// layer has no main command, ports or labels): CMD, ENTRYPOINT, EXPOSE,
// LABEL, MAINTAINER, STOPSIGNAL, HEALTHCHECK.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::layers::dockerfile {

/// One instruction as written (continuations joined, comments dropped).
struct instruction {
  /// 1-based line where it starts.
  int line = 0;
  /// Upper-cased keyword ("RUN").
  std::string keyword;
  /// Everything after the keyword, trimmed (flags included).
  std::string args;
  /// The JSON array form (`RUN ["a","b"]`), when args is one.
  bool json_form = false;
  std::vector<std::string> json;
};

/// Splits Dockerfile text into instructions. Errors name the line.
expected<std::vector<instruction>> parse(std::string_view text);

/// What one step of a build does.
struct step {
  enum class kind { run, copy, config };
  kind what = kind::config;
  int line = 0;
  /// The instruction after substitution ("COPY a.txt /app/"): what a cache
  /// key hashes and what the build prints.
  std::string text;
  /// run: the command (`/bin/sh -c ...` for the shell form).
  std::vector<std::string> argv;
  /// run: its environment (ENV over the base's env, plus ARG values not
  /// shadowed by ENV); its working directory and user are `config`'s.
  std::map<std::string, std::string> env;
  /// copy: sources relative to the build context, and the destination
  /// (absolute; ending in '/' when it names a directory).
  std::vector<std::string> sources;
  std::string dest;
  /// copy: true for ADD (the driver refuses archives, which ADD would unpack).
  bool add = false;
  /// ENV/WORKDIR/USER in force after this step.
  layer_config config;
};

/// A whole build.
struct plan {
  /// The FROM reference after substitution.
  std::string from;
  std::vector<step> steps;
  /// ENV, WORKDIR and USER at the end: the built layer's exec defaults.
  layer_config config;
  /// Instructions recorded without effect, and build args nobody declared.
  std::vector<std::string> warnings;
};

/// The FROM reference (with ARGs declared before FROM substituted);
/// invalid_argument when the file has no FROM first.
expected<std::string> base_of(const std::vector<instruction>& ins,
                              const std::map<std::string, std::string>& build_args);

/// Plans the build over a base layer whose exec defaults are `base`.
expected<plan> make_plan(const std::vector<instruction>& ins,
                         const std::map<std::string, std::string>& build_args,
                         const layer_config& base);

/// `$var`, `${var}`, `${var:-word}`, `${var:+word}` and `\$` in `text`
/// against `vars` (unset: empty), quotes kept as written.
std::string substitute(std::string_view text, const std::map<std::string, std::string>& vars);

} // namespace dsec::layers::dockerfile
