// The identity of an E2B envd call on the node (e2b_identity.hpp).
#include "actors/e2b_identity.hpp"

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"

namespace dsec::e2b {

namespace {

/// Bound on a call through the front door (core/clock.hpp).
constexpr auto call_timeout = call_wait(hop::front);
/// /etc/passwd larger than this is not read (no user then): 1 MiB holds
/// thousands of entries.
constexpr uint64_t max_passwd_bytes = 1 << 20;
/// A preparing command's own limit, seconds: two mkdirs and a touch.
constexpr double prepare_timeout_s = 30;

/// Whether preparing as `who` changes anything: the sandbox default and
/// root own what the node writes anyway.
bool acts_as_user(const envd_identity& who) { return !who.user.empty() && who.uid != 0; }

/// Runs `script` with `path` as $1, as `who`, then calls `then` with its
/// stdout (empty on any failure).
void run_as(const gateway_ref& g, const std::string& id, const envd_identity& who,
            const char* script, const std::string& path, std::function<void(std::string)> then) {
  exec_request req;
  req.argv = {"/bin/sh", "-c", script, "sh", path};
  req.user = who.user;
  req.cwd = "/";
  req.timeout_s = prepare_timeout_s;
  auto bound = caf::duration{call_timeout + std::chrono::seconds(static_cast<int>(prepare_timeout_s))};
  g.self->request(g.front, bound, exec_atom::value, id, std::move(req), uint64_t{0})
    .then([then](exec_result& r) { then(r.exit_code == 0 ? r.stdout_data : std::string{}); },
          [then](caf::error&) { then({}); });
}

} // namespace

void with_identity(const gateway_ref& g, const std::string& id, const std::string& asked,
                   std::function<void(envd_identity)> then,
                   std::function<void(const error&)> fail) {
  g.self->request(g.front, call_timeout, rfile_atom::value, id, std::string{"/etc/passwd"},
                  max_passwd_bytes)
    .then(
      [asked, then, fail](std::string& passwd) {
        auto who = identity_of(passwd, asked);
        if (!who)
          return fail(who.err());
        who->passwd = std::move(passwd);
        then(std::move(*who));
      },
      [asked, then, fail](caf::error& err) {
        auto e = from_caf(err);
        // No passwd (or an odd one): no E2B user, unless one was named.
        if (e.code == errc::not_found || e.code == errc::invalid_argument
            || e.code == errc::too_large) {
          auto who = identity_of({}, asked);
          if (!who)
            return fail(who.err());
          return then(std::move(*who));
        }
        fail(e);
      });
}

expected<std::string> asked_user(const http_call& c, const std::string& query_user) {
  auto user = basic_auth_user(c->header("authorization"));
  if (!user || !user->empty())
    return user;
  if (query_user.size() > 64 || query_user.find_first_of("/:\n\r\t ") != std::string::npos)
    return invalid_argument("envd: username \"" + query_user.substr(0, 64)
                            + "\" is not a user name");
  return query_user;
}

void with_owner_names(const gateway_ref& g, const std::string& id, const envd_identity& who,
                      std::function<void(owner_names)> then) {
  g.self->request(g.front, call_timeout, rfile_atom::value, id, std::string{"/etc/group"},
                  max_passwd_bytes)
    .then([passwd = who.passwd, then](std::string& group) { then(owner_names_of(passwd, group)); },
          [passwd = who.passwd, then](caf::error&) { then(owner_names_of(passwd, {})); });
}

void prepare_owned_file(const gateway_ref& g, const std::string& id, const envd_identity& who,
                        const std::string& path, std::function<void()> then) {
  if (!acts_as_user(who))
    return then();
  // Parents first, each made by the user; the file only if it is missing
  // (an existing file keeps its owner, as E2B's envd leaves it).
  static const char* script =
    "d=${1%/*}; [ -z \"$d\" ] || [ -d \"$d\" ] || mkdir -p -- \"$d\" || exit 1; "
    "[ -e \"$1\" ] || [ -L \"$1\" ] || : > \"$1\"";
  run_as(g, id, who, script, path, [then](std::string) { then(); });
}

void make_dir_as(const gateway_ref& g, const std::string& id, const envd_identity& who,
                 const std::string& path, std::function<void(bool)> then) {
  if (!acts_as_user(who))
    return then(false);
  static const char* script =
    "[ -e \"$1\" ] || [ -L \"$1\" ] && exit 0; mkdir -p -- \"$1\" && echo made";
  run_as(g, id, who, script, path, [then](std::string out) { then(out == "made\n"); });
}

} // namespace dsec::e2b
