// E2B's template build API on dsec's Dockerfile builder, the pure half: the
// request and answer shapes of POST /v3/templates, GET/PUT
// /templates/{id}/files/{hash}, POST /v2/templates/{id}/builds/{buildID},
// GET .../builds/{buildID}/status, GET /templates/aliases/{alias} and the
// tag routes; the translation of the SDK's steps into a Dockerfile; and the
// store's record of built templates (<store>/e2b_templates.json).
//
// A template is named `name` (its templateID too); a build of it gets one or
// more tags (`default` when none is given) and becomes the layer
// `e2b/<name>@<first tag>`; every tag maps to a layer, so `Sandbox.create(
// "name:tag")` (and `name`, = `name:default`) creates from it.
//
// The SDK's steps map onto Dockerfile instructions: RUN (as /bin/sh -c; with
// a user: USER u, RUN, USER back), COPY (the uploaded tar, globs expanded on
// the node), ENV, WORKDIR, USER. startCmd and readyCmd are kept with the
// template's tags and run by every sandbox created from it (e2b_start_cmd.hpp).
// Refused by name (400): fromImageRegistry, COPY's user and mode, any other
// step type or field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace dsec::e2b {

/// `name[:tag]`: a name is 1-64 of [a-z0-9._-] starting with a letter or
/// digit; a tag 1-64 of [A-Za-z0-9._-]. `tag` is empty when none was given.
struct template_name {
  std::string name;
  std::string tag;
};

/// The tag a build without tags gets, and the one `name` alone means.
inline constexpr const char* default_tag = "default";

[[nodiscard]] expected<template_name> parse_template_name(std::string_view text,
                                                          const char* what);
[[nodiscard]] status check_tag(std::string_view tag);

/// POST /v3/templates: the name (`name`, or the deprecated `alias`) and the
/// tags (the name's own tag first), with the sandbox size sandboxes of this
/// template get (cpuCount, memoryMB; absent: the node's defaults).
struct build_request {
  std::string name;
  std::vector<std::string> tags;
  double cpu = 0;
  int64_t memory_mb = 0;
};

[[nodiscard]] expected<build_request> parse_build_request(std::string_view body);

/// One step of a build as the SDK sends it.
struct template_step {
  std::string type; // RUN, COPY, ENV, WORKDIR, USER
  std::vector<std::string> args;
  std::string files_hash; // COPY: sha256 hex of the uploaded files
  bool force = false;
};

/// POST /v2/templates/{id}/builds/{buildID}: the base (an image reference,
/// or a template name; `e2bdev/base`, E2B's default base image, is the
/// `base` template here) and the steps; force (skipCache) rebuilds every
/// step, and so does any step's force (the builder's cache is all or none).
struct build_start {
  std::string from_image;
  std::string from_template;
  std::vector<template_step> steps;
  bool force = false;
  /// setStartCmd: started in the background by every sandbox of the
  /// template, as its user, in its workdir, with its env ("" = none).
  std::string start_cmd;
  /// setReadyCmd (or setStartCmd's second argument): a create answers once
  /// it exits 0 ("" = no wait).
  std::string ready_cmd;
};

/// A child of a template with start/ready commands (fromTemplate) gets the
/// parent's start command when it sets none (E2B starts the child from the
/// parent's snapshot, whose start process runs), and the parent's ready
/// command too when it sets neither; a child's setStartCmd replaces both.
/// True if the child took anything of the parent's.
bool inherit_start(build_start& child, const std::string& parent_start,
                   const std::string& parent_ready);

/// Refuses by name what dsec does not build:
/// fromImageRegistry, unknown fields and step types, COPY's user and mode,
/// an image reference with no reachable registry (Docker Hub names).
[[nodiscard]] expected<build_start> parse_build_start(std::string_view body);

/// True for a sha256 hex digest (64 lower-case hex), as filesHash is.
bool is_files_hash(std::string_view s);

/// Where COPY step i's files are in the build context, and where they go:
/// `COPY <dir>/ <dest>` copies the directory's contents into dest.
struct copy_layout {
  std::string dir;
  std::string dest;
};

/// How E2B's COPY of `src` (a path or a glob) to `dest` lands, given the
/// paths it matched: `rename` when one non-directory matched a plain path
/// and dest names a file (the file is put in the context as
/// basename(dest), copied into dirname(dest)); otherwise each match goes
/// into dest as a directory entry.
struct copy_target {
  bool rename = false;
  std::string entry_name; // rename: the file's name in its directory
  std::string dest_dir;   // ends in '/'
};
copy_target copy_target_of(const std::string& src, const std::string& dest, bool single_file);

/// The Dockerfile of a build: `from` is a layer ref, `base_user` the base's
/// default user ("" = root), `copies` each COPY step's layout by step
/// index. `step_of` gets, for each instruction after FROM, the SDK's step
/// index (1-based, as its stack traces count) it came from.
[[nodiscard]] expected<std::string> make_dockerfile(const build_start& b, const std::string& from,
                                                    const std::string& base_user,
                                                    const std::map<size_t, copy_layout>& copies,
                                                    std::vector<int>& step_of);

/// One log line of a build.
struct build_log {
  int64_t at_ms = 0;
  std::string level; // info, error
  std::string message;
};

/// E2B's TemplateBuildInfo, with the log entries from `offset` on (at most
/// 100 per answer, as E2B's).
std::string encode_build_status(const std::string& template_id, const std::string& build_id,
                                const std::string& status, const std::vector<build_log>& logs,
                                size_t offset, const std::string& reason, const std::string& step);

/// RFC 3339 UTC time of Unix milliseconds.
std::string rfc3339(int64_t ms);

// -- the store's record (blocking, small file reads and writes) ---------------

/// One tag of a template: the build it came from and the layer it names.
struct template_tag {
  std::string build_id;
  std::string layer;
  int64_t created_at_ms = 0;
  double cpu = 0;
  int64_t memory_mb = 0;
  /// The build's startCmd and readyCmd ("" = none).
  std::string start_cmd;
  std::string ready_cmd;
};

/// Template name -> tag -> what it names.
using template_map = std::map<std::string, std::map<std::string, template_tag>>;

/// The built templates recorded in the store at `root`; none without a
/// record. A corrupt record is an error naming its path.
[[nodiscard]] expected<template_map> read_templates(const std::string& root);

/// Replaces the whole record (atomic rename, under the record's lock).
[[nodiscard]] status write_templates(const std::string& root, const template_map& all);

} // namespace dsec::e2b
