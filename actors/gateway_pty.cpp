// REST terminals (see gateway_pty.hpp): JSON routes that open, type at,
// resize and kill a terminal, and a WebSocket that carries one. The
// WebSocket's output is pushed by the sandbox actor to a relay (the follow
// row), first the scrollback it kept, then live; its input and control
// messages go through a small bridge actor, one request at a time in the
// order they came, so typed bytes reach the terminal in order and an error
// (the terminal exited) comes back as a text message.
#include "actors/gateway_pty.hpp"

#include <cctype>
#include <cstdlib>
#include <mutex>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/chunk_relay.hpp"
#include "actors/gateway_trajectory.hpp"
#include "actors/interfaces.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"
#include "core/json_codec.hpp"

namespace dsec {

namespace {

using json = nlohmann::json;

constexpr auto call_timeout = call_wait(hop::front);

/// What opens a terminal: the command (empty: the login shell) and size.
struct pty_request {
  exec_request req;
  int32_t cols = 80, rows = 24;
};

error bad(const std::string& field, const std::string& why) {
  return invalid_argument("open terminal: " + field + " " + why);
}

/// A size field: an integer (its range is the owner's check, one message).
status size_field(const json& v, const char* name, int32_t& out) {
  if (!v.is_number_integer())
    return bad(name, "must be an integer");
  auto n = v.get<int64_t>();
  out = n < -1 ? -1 : n > 100000 ? 100000 : int32_t(n);
  return {};
}

/// {"cmd": str | [str], "cols", "rows", "env": {..}, "cwd"}, all optional.
expected<pty_request> parse_body(std::string_view body) {
  pty_request p;
  if (body.empty())
    return p;
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("open terminal: the body must be a JSON object");
  for (auto& [k, v] : j.items()) {
    if (k == "cmd") {
      if (v.is_string() && !v.get<std::string>().empty())
        p.req.argv = {"/bin/sh", "-c", v.get<std::string>()};
      else if (v.is_array() && !v.empty()) {
        for (auto& a : v) {
          if (!a.is_string())
            return bad("cmd", "must be a string or an array of strings");
          p.req.argv.push_back(a.get<std::string>());
        }
      } else if (!v.is_null())
        return bad("cmd", "must be a non-empty string or array of strings");
    } else if (k == "cols" || k == "rows") {
      if (auto st = size_field(v, k.c_str(), k == "cols" ? p.cols : p.rows); !st)
        return st.err();
    } else if (k == "env") {
      if (!v.is_object())
        return bad("env", "must be an object of strings");
      for (auto& [ek, ev] : v.items()) {
        if (!ev.is_string())
          return bad("env", "must be an object of strings");
        p.req.env[ek] = ev.get<std::string>();
      }
    } else if (k == "cwd") {
      if (!v.is_string())
        return bad("cwd", "must be a string");
      p.req.cwd = v.get<std::string>();
    } else {
      return invalid_argument("open terminal: unknown field \"" + k.substr(0, 64)
                              + "\" (known: cmd, cols, rows, env, cwd)");
    }
  }
  return p;
}

/// The WebSocket form takes the same fields from the query (no env).
expected<pty_request> parse_query(const route& r) {
  pty_request p;
  for (auto& [k, v] : r.query) {
    if (k == "cmd") {
      if (!v.empty())
        p.req.argv = {"/bin/sh", "-c", v};
    } else if (k == "cols" || k == "rows") {
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != 0)
        return bad(k, "must be an integer, got \"" + v.substr(0, 32) + "\"");
      (k == "cols" ? p.cols : p.rows) = n < -1 ? -1 : n > 100000 ? 100000 : int32_t(n);
    } else if (k == "cwd") {
      p.req.cwd = v;
    } else {
      return invalid_argument("open terminal: unknown query parameter \"" + k.substr(0, 64)
                              + "\" (known: cmd, cols, rows, cwd)");
    }
  }
  return p;
}

bool wants_websocket(const http_call& c) {
  auto up = c->header("upgrade");
  for (auto& ch : up)
    ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return up == "websocket";
}

std::string control(const json& j) { return j.dump(); }

std::string error_message(const error& e) {
  return control({{"type", "error"}, {"code", std::string(to_string(e.code))}, {"message", e.message}});
}

/// The WebSocket of one attachment, set once the upgrade ran.
struct ws_slot {
  std::mutex mu;
  std::shared_ptr<ws_conn> ws;
  void send(std::string data, bool binary) {
    std::lock_guard<std::mutex> g(mu);
    if (ws)
      ws->send(std::move(data), binary);
  }
  void close() {
    std::lock_guard<std::mutex> g(mu);
    if (ws)
      ws->close();
  }
};

/// Input and control of one WebSocket, in order: each message one request
/// to the front door; an error goes back to the client as a text message.
caf::behavior pty_bridge(caf::event_based_actor* self, placement_actor front, std::string id,
                         int32_t pid, std::shared_ptr<ws_slot> slot) {
  auto fail = [slot](caf::error& err) { slot->send(error_message(from_caf(err)), false); };
  return {
    [=](ptywrite_atom, std::string& data) {
      self->request(front, call_timeout, ptywrite_atom::value, id, pid, std::move(data))
        .then([](bool) {}, fail);
    },
    [=](ptysize_atom, int32_t cols, int32_t rows) {
      self->request(front, call_timeout, ptysize_atom::value, id, pid, cols, rows)
        .then([](bool) {}, fail);
    },
    [=](signal_atom, int32_t signo) {
      self->request(front, call_timeout, signal_atom::value, id, pid, signo, true)
        .then([](bool) {}, fail);
    },
  };
}

/// A text message from the client: {"type":"resize","cols","rows"},
/// {"type":"input","data"}, {"type":"kill"[, "signal"]}.
void on_control(const caf::actor& bridge, const std::shared_ptr<ws_slot>& slot,
                const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  auto type = j.is_object() && j.contains("type") && j["type"].is_string()
                ? j["type"].get<std::string>() : std::string{};
  auto num = [&](const char* k, int32_t dflt) -> int32_t {
    if (!j.contains(k) || !j[k].is_number_integer())
      return dflt;
    auto n = j[k].get<int64_t>();
    return n < -1 ? -1 : n > 100000 ? 100000 : int32_t(n);
  };
  if (type == "resize")
    return caf::anon_send(bridge, ptysize_atom::value, num("cols", -1), num("rows", -1));
  if (type == "input" && j.contains("data") && j["data"].is_string())
    return caf::anon_send(bridge, ptywrite_atom::value, j["data"].get<std::string>());
  if (type == "kill")
    return caf::anon_send(bridge, signal_atom::value, num("signal", 9));
  slot->send(error_message(invalid_argument(
               "terminal control: expected {\"type\":\"resize\",\"cols\",\"rows\"}, "
               "{\"type\":\"input\",\"data\"} or {\"type\":\"kill\"}")),
             false);
}

/// Carries terminal `pid` over the request's WebSocket: a "started" text
/// message, the scrollback and live output as binary messages, "exit" (or
/// "error") at the end, then a close.
void attach(gateway_actor_ptr self, const http_call& c, const std::string& id, int32_t pid) {
  auto slot = std::make_shared<ws_slot>();
  auto bridge = self->spawn(pty_bridge, self->state.front, id, pid, slot);
  auto relay = spawn_chunk_relay(self, [slot](exec_chunk ch) {
    if (ch.stream != subscribed_stream)
      slot->send(std::move(ch.data), true);
  });
  ws_handlers h;
  h.on_message = [bridge, slot](std::string data, bool binary) {
    if (binary)
      caf::anon_send(bridge, ptywrite_atom::value, std::move(data));
    else
      on_control(bridge, slot, data);
  };
  // The client left: it unsubscribes (the terminal goes on).
  h.on_close = [bridge, relay] {
    caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(bridge, caf::exit_reason::user_shutdown);
  };
  auto ws = c->upgrade_websocket(std::move(h));
  if (!ws) { // cannot happen: checked by wants_websocket()
    caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(bridge, caf::exit_reason::user_shutdown);
    return gateway_reply_error(c, invalid_argument("terminal: not a WebSocket upgrade"));
  }
  {
    std::lock_guard<std::mutex> g(slot->mu);
    slot->ws = ws;
  }
  ws->send(control({{"type", "started"}, {"pid", pid}}), false);
  auto end = [self, relay, bridge, slot](std::string last) {
    drain_chunk_relay(self, relay, [slot, bridge, last = std::move(last)] {
      slot->send(last, false);
      slot->close();
      caf::anon_send_exit(bridge, caf::exit_reason::user_shutdown);
    });
  };
  self->request(self->state.front, caf::infinite, follow_atom::value, id, pid, relay,
                uint64_t{0})
    .then(
      [end](background_process& p) {
        end(control({{"type", "exit"}, {"exit_code", p.result.exit_code}}));
      },
      [end](caf::error& err) { end(error_message(from_caf(err))); });
}

void answer(const http_call& c, int status, std::string body) {
  gateway_reply(c, status, std::move(body), "application/json");
}

auto on_error(const http_call& c) {
  return [c](caf::error& err) { gateway_reply_error(c, from_caf(err)); };
}

void open_route(gateway_actor_ptr self, const http_call& c, const route& r) {
  bool ws = c->method == "GET";
  if (ws && !wants_websocket(c))
    return gateway_reply_error(c, invalid_argument("GET /v1/sandboxes/" + r.id
                                                   + "/pty: a WebSocket upgrade is required "
                                                     "(POST opens one without)"));
  auto p = ws ? parse_query(r) : parse_body(c->body);
  if (!p)
    return gateway_reply_error(c, p.err());
  self->request(self->state.front, call_timeout, ptyopen_atom::value, r.id, std::move(p->req),
                p->cols, p->rows)
    .then(
      [self, c, ws, id = r.id](background_process& proc) {
        if (ws)
          return attach(self, c, id, proc.pid);
        answer(c, 201, json_codec::encode(proc));
      },
      on_error(c));
}

void get_route(gateway_actor_ptr self, const http_call& c, const route& r) {
  // Checked before the upgrade, so a missing sandbox or pid is a plain 404.
  self->request(self->state.front, call_timeout, proc_atom::value, r.id, r.pid, int64_t{0})
    .then(
      [self, c, id = r.id, pid = r.pid](background_process& proc) {
        if (wants_websocket(c))
          return attach(self, c, id, pid);
        answer(c, 200, json_codec::encode(proc));
      },
      on_error(c));
}

void resize_route(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto j = json::parse(c->body, nullptr, false);
  int32_t cols = 0, rows = 0;
  if (j.is_discarded() || !j.is_object() || !j.contains("cols") || !j.contains("rows"))
    return gateway_reply_error(c, invalid_argument("resize terminal: the body must be "
                                                   "{\"cols\": N, \"rows\": N}"));
  if (auto st = size_field(j["cols"], "cols", cols); !st)
    return gateway_reply_error(c, st.err());
  if (auto st = size_field(j["rows"], "rows", rows); !st)
    return gateway_reply_error(c, st.err());
  self->request(self->state.front, call_timeout, ptysize_atom::value, r.id, r.pid, cols, rows)
    .then([c, cols, rows](bool) {
            answer(c, 200, control({{"cols", cols}, {"rows", rows}}));
          },
          on_error(c));
}

} // namespace

void handle_pty(gateway_actor_ptr self, const http_call& c, const route& r) {
  switch (r.kind) {
    case route::pty_open: return open_route(self, c, r);
    case route::pty_get: return get_route(self, c, r);
    case route::pty_input:
      self->request(self->state.front, call_timeout, ptywrite_atom::value, r.id, r.pid, c->body)
        .then([c](bool) { answer(c, 200, "{}"); }, on_error(c));
      return;
    case route::pty_resize: return resize_route(self, c, r);
    case route::pty_kill:
      self->request(self->state.front, call_timeout, signal_atom::value, r.id, r.pid, int32_t{9},
                    true)
        .then([c](bool) { answer(c, 200, "{}"); }, on_error(c));
      return;
    default:
      return gateway_reply_error(c, invalid_argument("terminal: no such route"));
  }
}

} // namespace dsec
