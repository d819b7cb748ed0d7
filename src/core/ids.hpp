// Sandbox and node ids. A sandbox id is `<node-id>.<unique>`: the node part
// routes every call to the owner; the unique part is time-ordered plus random,
// so ids are never reused, not even across node restarts.
#pragma once

#include <string>
#include <string_view>

namespace dsec {

/// True for a valid node id: 1-32 chars of [a-z0-9-], starting alphanumeric.
bool valid_node_id(std::string_view id);

/// A fresh node id derived from the host name and randomness ("n-3f9a1c").
std::string make_node_id();

/// A fresh sandbox id owned by `node_id`.
std::string make_sandbox_id(std::string_view node_id);

/// True if `id` has the shape `<node-id>.<unique>` with a safe unique part
/// (only [a-z0-9], so it is safe as a path component and cgroup name).
bool valid_sandbox_id(std::string_view id);

/// The owner node of a sandbox id (the part before the first '.').
std::string_view owner_of(std::string_view sandbox_id);

} // namespace dsec
