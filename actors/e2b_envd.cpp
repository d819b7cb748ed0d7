// E2B envd (e2b_gateway.hpp): the Connect RPCs of process.Process and
// filesystem.Filesystem with the JSON codec, GET/POST /files and GET /health,
// for the sandbox named by E2b-Sandbox-Id.
//
// A command (Start) runs as a dsec background command, so it has its pid at
// once, outlives the request like E2B's, and any peer can Connect to it, list
// it and signal it. Its output is pushed to the stream (the follow row of
// interfaces.hpp): the sandbox actor sends every chunk to a relay that
// writes it as a data event as it comes, a Connect first gets what the
// command printed before; a silent stream gets a keepalive. WatchDir is
// pushed the same way (the watch row: inotify events from the backend).
#include "actors/e2b_gateway.hpp"

#include <atomic>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/chunk_relay.hpp"
#include "actors/e2b_envd_stream.hpp"
#include "actors/e2b_identity.hpp" // E2B's user and home (issue 27)
#include "actors/interfaces.hpp"
#include "actors/sandbox_pty.hpp" // terminals (issue 26 part 1)
#include "api/e2b_codec.hpp"
#include "api/e2b_upload.hpp" // envd 0.6 uploads (issue 27)
#include "core/clock.hpp"
#include "core/fs_entry_inspect.hpp"
#include "core/inspect.hpp"

namespace dsec::e2b {

// -- what the streaming RPCs share (e2b_envd_stream.hpp) -------------------------------

bool paused_refusal(const error& err) {
  return err.code == errc::unavailable && err.message.find("is paused") != std::string::npos;
}

void answer_paused(const http_call& c, const error& err) {
  answer(c, 502, error_body(502, err.message));
}

void stream_error(const http_call& c, const error& err) {
  if (paused_refusal(err))
    return answer_paused(c, err);
  c->begin_stream(200, connect_json);
  c->write_chunk(end_of_stream(connect_code(err.code), err.message));
  c->end_stream();
}

expected<std::string> stream_message(const http_call& c) {
  auto ct = c->header("content-type");
  if (ct.rfind("application/connect+json", 0) != 0)
    return invalid_argument("connect: a streaming call needs Content-Type application/connect+json"
                            ", got \"" + ct.substr(0, 100) + "\"");
  return unwrap_request(c->body);
}

namespace {

using namespace std::chrono_literals;

/// Bound on a unary call through the front door (core/clock.hpp).
constexpr auto call_timeout = call_wait(hop::front);
/// Output sent per data event (base64 makes it a third larger).
constexpr size_t max_event_bytes = 1u << 20;

// -- answers ----------------------------------------------------------------------

/// An envd HTTP error (GET/POST /files, /health): E2B's `{code, message}`.
void http_error(const http_call& c, const error& err) {
  if (paused_refusal(err))
    return answer_paused(c, err);
  int status = http_status(err.code);
  answer(c, status, error_body(status, err.message));
}

/// A unary Connect error.
void rpc_error(const http_call& c, const error& err) {
  if (paused_refusal(err))
    return answer_paused(c, err);
  auto code = connect_code(err.code);
  answer(c, connect_status(code), connect_error(code, err.message));
}

auto on_rpc_error(const http_call& c) {
  return [c](caf::error& err) { rpc_error(c, from_caf(err)); };
}

void unimplemented(const http_call& c, const std::string& what, bool streaming) {
  auto msg = what + ": not implemented by dsec's envd " + std::string{envd_version};
  if (streaming) {
    c->begin_stream(200, connect_json);
    c->write_chunk(end_of_stream("unimplemented", msg));
    c->end_stream();
    return;
  }
  answer(c, 501, connect_error("unimplemented", msg));
}

// -- process output streams ---------------------------------------------------------

/// Writes a data event per at most max_event_bytes of `data`.
void send_data(const http_call& c, int stream, const std::string& data) {
  for (size_t sent = 0; sent < data.size();) {
    auto n = std::min(max_event_bytes, data.size() - sent);
    c->write_chunk(envelope(0, data_event(stream, std::string_view{data}.substr(sent, n))));
    sent += n;
  }
}

/// The relay a Start or Connect stream's output is pushed to: each chunk a
/// data event; a keepalive when silent. A Connect's stream opens (start
/// event) once the subscription is set (`open` false until then).
caf::actor spawn_output_relay(const gateway_ref& g, const http_call& c, int32_t pid,
                              std::shared_ptr<std::atomic<bool>> open) {
  return spawn_chunk_relay(
    g.self,
    [c, pid, open](exec_chunk chunk) {
      if (chunk.stream == subscribed_stream && !open->exchange(true)) {
        c->begin_stream(200, connect_json);
        c->write_chunk(envelope(0, start_event(pid)));
      }
      if (chunk.stream == 1 || chunk.stream == 2)
        send_data(c, chunk.stream, chunk.data);
      else if (chunk.stream == pty_stream) // a terminal's output (sandbox_pty.hpp)
        for (size_t sent = 0; sent < chunk.data.size(); sent += max_event_bytes)
          c->write_chunk(envelope(0, pty_data_event(std::string_view{chunk.data}.substr(
                                       sent, max_event_bytes))));
    },
    std::chrono::duration_cast<std::chrono::milliseconds>(keepalive_every), [c, open] {
      if (*open)
        c->write_chunk(envelope(0, keepalive_event()));
    });
}

/// The last events of a followed command: its end, then end-of-stream.
void end_process_stream(const http_call& c, int32_t pid, const exec_result& res) {
  if (res.timed_out) {
    c->write_chunk(end_of_stream("deadline_exceeded", "command " + std::to_string(pid)
                                                        + " ran past its timeout and was killed"));
  } else {
    c->write_chunk(envelope(0, end_event(res)));
    c->write_chunk(end_of_stream());
  }
  c->end_stream();
}

/// Follows command `pid` into the open stream: its output as the sandbox
/// pushes it, then its end. `opened` is false for a Connect whose start event
/// waits for the subscription (a pid that is not there stays a plain error).
void follow_into(const gateway_ref& g, const http_call& c, const std::string& id, int32_t pid,
                 bool opened) {
  auto open = std::make_shared<std::atomic<bool>>(opened);
  auto relay = spawn_output_relay(g, c, pid, open);
  // A client that leaves unsubscribes (the sandbox actor monitors the
  // relay); the command goes on.
  c->on_disconnect([relay] { caf::anon_send_exit(relay, caf::exit_reason::user_shutdown); });
  auto self = g.self;
  auto drain = [self, relay](std::function<void()> then) {
    drain_chunk_relay(self, relay, std::move(then));
  };
  // No bound: answered when the command ends (a peer that drops fails it).
  self->request(g.front, caf::infinite, follow_atom::value, id, pid, relay, uint64_t{0})
    .then(
      [c, pid, drain](background_process& p) {
        drain([c, pid, res = std::move(p.result)] { end_process_stream(c, pid, res); });
      },
      [c, open, drain](caf::error& err) {
        drain([c, open, e = from_caf(err)] {
          if (!open->exchange(true))
            return stream_error(c, e);
          // The sandbox went away under the command: drop the connection as
          // E2B's envd does (the SDK then finds the sandbox gone).
          if (e.code == errc::unavailable || e.code == errc::not_found)
            return c->abort_stream();
          c->write_chunk(end_of_stream(connect_code(e.code), e.message));
          c->end_stream();
        });
      });
}

/// Start: opens the stream with the start event and follows the command.
void open_stream(const gateway_ref& g, const http_call& c, const std::string& id, int32_t pid) {
  c->begin_stream(200, connect_json);
  c->write_chunk(envelope(0, start_event(pid)));
  follow_into(g, c, id, pid, true);
}

status unary_content_type(const http_call& c) {
  auto ct = c->header("content-type");
  if (ct.rfind("application/json", 0) != 0)
    return invalid_argument("connect: a unary call needs Content-Type application/json, got \""
                            + ct.substr(0, 100) + "\"");
  return {};
}

/// Runs `f` with the identity of the call (e2b_identity.hpp): the user it
/// names, else E2B's default; its errors answered as the call's own
/// (`streaming`: a Connect stream; `http`: GET/POST /files).
void as_caller(const gateway_ref& g, const http_call& c, const std::string& id,
               const std::string& query_user, std::function<void(const envd_identity&)> f,
               bool streaming, bool http = false) {
  auto fail = [c, streaming, http](const error& e) {
    if (http)
      return http_error(c, e);
    if (streaming)
      return stream_error(c, e);
    rpc_error(c, e);
  };
  auto asked = asked_user(c, query_user);
  if (!asked)
    return fail(asked.err());
  with_identity(g, id, *asked, [f](envd_identity who) { f(who); }, fail);
}

void start_pty(const gateway_ref& g, const http_call& c, const std::string& id, exec_request req,
               const std::string& msg);

void process_start(const gateway_ref& g, const http_call& c, const std::string& id,
                   const envd_identity& who) {
  auto msg = stream_message(c);
  if (!msg)
    return stream_error(c, msg.err());
  bool pty = false;
  bool keep_stdin = false;
  auto req = parse_start(*msg, pty, &keep_stdin, who.home);
  if (!req)
    return stream_error(c, req.err());
  // E2B's user in its home, unless the sandbox has no such user (issue 27).
  req->user = who.user;
  if (req->cwd.empty() && !who.user.empty())
    req->cwd = who.home;
  // The SDK's timeoutMs (default 60 s; 0 = none) bounds the command, as in E2B.
  auto tmo = c->header("connect-timeout-ms");
  if (!tmo.empty() && tmo.size() < 12 && tmo.find_first_not_of("0123456789") == std::string::npos)
    req->timeout_s = static_cast<double>(std::stoll(tmo)) / 1000.0;
  auto self = g.self;
  if (pty) // a terminal (actors/sandbox_pty.hpp): output as pty data events
    return start_pty(g, c, id, std::move(*req), *msg);
  self->request(g.front, call_timeout, bgexec_atom::value, id, std::move(*req), keep_stdin)
    .then([g, c, id](background_process& p) { open_stream(g, c, id, p.pid); },
          [c](caf::error& err) { stream_error(c, from_caf(err)); });
}

/// Start with a pty: a terminal of the request's size.
void start_pty(const gateway_ref& g, const http_call& c, const std::string& id, exec_request req,
               const std::string& msg) {
  auto size = parse_start_pty(msg);
  if (!size)
    return stream_error(c, size.err());
  g.self->request(g.front, call_timeout, ptyopen_atom::value, id, std::move(req), size->first,
                  size->second)
    .then([g, c, id](background_process& p) { open_stream(g, c, id, p.pid); },
          [c](caf::error& err) { stream_error(c, from_caf(err)); });
}

/// Update: a terminal's new size.
void process_update(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto up = parse_update(c->body);
  if (!up)
    return rpc_error(c, up.err());
  auto [pid, cols, rows] = *up;
  g.self->request(g.front, call_timeout, ptysize_atom::value, id, pid, cols, rows)
    .then([c](bool) { answer(c, 200, "{}"); }, on_rpc_error(c));
}

void process_connect(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto msg = stream_message(c);
  if (!msg)
    return stream_error(c, msg.err());
  auto pid = parse_selector(*msg);
  if (!pid)
    return stream_error(c, pid.err());
  follow_into(g, c, id, *pid, false);
}

void process_list(const gateway_ref& g, const http_call& c, const std::string& id) {
  g.self->request(g.front, call_timeout, procs_atom::value, id)
    .then(
      [c](std::vector<process_info>& all) {
        std::vector<process_info> mine;
        for (auto& p : all)
          if (p.background)
            mine.push_back(std::move(p));
        answer(c, 200, encode_process_list(mine));
      },
      on_rpc_error(c));
}

void process_signal(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto req = parse_signal(c->body);
  if (!req)
    return rpc_error(c, req.err());
  g.self->request(g.front, call_timeout, signal_atom::value, id, req->first, req->second, true)
    .then([c](bool) { answer(c, 200, "{}"); }, on_rpc_error(c));
}

/// SendInput (`close` false) and CloseStdin (`close` true).
void process_stdin(const gateway_ref& g, const http_call& c, const std::string& id, bool close) {
  int32_t pid = 0;
  std::string data;
  if (close) {
    auto sel = parse_selector(c->body);
    if (!sel)
      return rpc_error(c, sel.err());
    pid = *sel;
  } else if (auto pty = parse_pty_input(c->body); !pty || *pty) {
    if (!pty)
      return rpc_error(c, pty.err());
    auto& [ppid, bytes] = **pty;
    g.self->request(g.front, call_timeout, ptywrite_atom::value, id, ppid, std::move(bytes))
      .then([c](bool) { answer(c, 200, "{}"); }, on_rpc_error(c));
    return;
  } else {
    auto in = parse_input(c->body);
    if (!in)
      return rpc_error(c, in.err());
    pid = in->first;
    data = std::move(in->second);
  }
  g.self->request(g.front, call_timeout, stdin_atom::value, id, pid, std::move(data), close)
    .then([c](bool) { answer(c, 200, "{}"); }, on_rpc_error(c));
}

// -- filesystem -------------------------------------------------------------------------

/// A filesystem call on absolute paths, as the node (root); entries name
/// their owners as `who`'s sandbox does.
void fs_call_as_root(const gateway_ref& g, const http_call& c, const std::string& id,
                     const envd_identity& who, const std::string& method,
                     const std::string& path, const std::string& to = {}, int32_t depth = 1);

void fs_call(const gateway_ref& g, const http_call& c, const std::string& id,
             const std::string& method, const envd_identity& who) {
  bool move = method == "Move";
  auto req = parse_fs(c->body, move, who.home);
  if (!req)
    return rpc_error(c, req.err());
  if (method == "MakeDir" && !who.user.empty() && who.uid != 0)
    // Made by the user, so it owns it (issue 27); its entry from a Stat.
    return make_dir_as(g, id, who, req->path, [g, c, id, who, path = req->path](bool made) {
      fs_call_as_root(g, c, id, who, made ? "Stat" : "MakeDir", path);
    });
  fs_call_as_root(g, c, id, who, method, req->path, req->to, req->depth);
}

void fs_call_as_root(const gateway_ref& g, const http_call& c, const std::string& id,
                     const envd_identity& who, const std::string& method,
                     const std::string& path, const std::string& to, int32_t depth) {
  bool move = method == "Move";
  const char* op = method == "Stat"      ? fs_ops::stat
                   : method == "ListDir" ? fs_ops::list
                   : method == "MakeDir" ? fs_ops::mkdir
                   : move                ? fs_ops::move
                                         : fs_ops::remove;
  g.self->request(g.front, call_timeout, fsop_atom::value, id, std::string{op}, path, to, depth)
    .then(
      [g, c, id, who, method](std::vector<fs_entry>& v) {
        if (method == "Remove" || v.empty())
          return answer(c, 200, method == "ListDir" ? encode_entries(v) : "{}");
        with_owner_names(g, id, who, [c, method, v = std::move(v)](owner_names names) mutable {
          if (method != "ListDir")
            return answer(c, 200, encode_entry_response(v.front(), &names));
          sort_walk_order(v);
          answer(c, 200, encode_entries(v, &names));
        });
      },
      [c, method](caf::error& err) {
        auto e = from_caf(err);
        // Remove is os.RemoveAll in E2B's envd: a missing path is no error.
        if (method == "Remove" && e.code == errc::not_found)
          return answer(c, 200, "{}");
        rpc_error(c, e);
      });
}

// -- GET/POST /files, /health -----------------------------------------------------------

void read_file(const gateway_ref& g, const http_call& c, const std::string& id,
               const std::map<std::string, std::string>& query, const envd_identity& who) {
  auto it = query.find("path");
  auto path = sandbox_path(it == query.end() ? std::string_view{} : std::string_view{it->second},
                           who.home);
  if (!path)
    return http_error(c, path.err());
  uint64_t max = g.ctx->config.max_file_bytes;
  g.self->request(g.front, call_timeout, rfile_atom::value, id, *path, max)
    .then([c](std::string& data) { answer(c, 200, std::move(data), "application/octet-stream"); },
          [c](caf::error& err) { http_error(c, from_caf(err)); });
}

struct upload_state {
  std::vector<std::string> written;
  /// X-Metadata-* of the upload, for every file (envd 0.6.2).
  std::map<std::string, std::string> metadata;
  size_t left = 0;
  bool failed = false;
};

/// One file of an upload is done (`err` set if it failed); the last answers.
void file_done(const http_call& c, const std::shared_ptr<upload_state>& st, const error& err) {
  --st->left;
  if (err && !st->failed) {
    st->failed = true;
    return http_error(c, err);
  }
  if (st->left == 0 && !st->failed)
    answer(c, 200, encode_written(st->written, st->metadata));
}

/// One file of an upload: written, then its metadata replaced by the
/// upload's (none clears what an earlier upload left, as E2B's envd does).
void write_one(const gateway_ref& g, const http_call& c, const std::string& id,
               std::shared_ptr<upload_state> st, upload f) {
  auto self = g.self;
  self->request(g.front, call_timeout, wfile_atom::value, id, f.path, std::move(f.data))
    .then(
      [g, c, id, st, path = f.path](bool) {
        g.self
          ->request(g.front, call_timeout, fsop_atom::value, id,
                    std::string{fs_ops::set_metadata}, path, metadata_lines(st->metadata),
                    int32_t{1})
          .then([c, st](std::vector<fs_entry>&) { file_done(c, st, {}); },
                [c, st](caf::error& err) {
                  // A backend without file operations keeps no metadata:
                  // fine when none was asked, refused by name otherwise.
                  if (st->metadata.empty())
                    return file_done(c, st, {});
                  auto e = from_caf(err);
                  file_done(c, st, error{e.code, "upload metadata: " + e.message});
                });
      },
      [c, st](caf::error& err) { file_done(c, st, from_caf(err)); });
}

void write_files(const gateway_ref& g, const http_call& c, const std::string& id,
                 const std::map<std::string, std::string>& query, const envd_identity& who) {
  auto it = query.find("path");
  std::string qpath = it == query.end() ? std::string{} : it->second;
  auto ct = c->header("content-type");
  // envd 0.6.2 metadata and 0.5.7 gzip bodies (api/e2b_upload.hpp), checked
  // before anything is written.
  auto metadata = parse_metadata_headers(c->headers);
  if (!metadata)
    return http_error(c, metadata.err());
  auto body = decode_upload_body(c->header("content-encoding"), c->body,
                                 g.ctx->config.max_file_bytes);
  if (!body)
    return http_error(c, body.err());
  std::vector<upload> files;
  if (ct.rfind("multipart/form-data", 0) == 0) {
    if (!qpath.empty()) {
      auto p = sandbox_path(qpath, who.home);
      if (!p)
        return http_error(c, p.err());
      qpath = *p;
    }
    auto parts = parse_multipart(ct, *body, qpath, who.home);
    if (!parts)
      return http_error(c, parts.err());
    files = std::move(*parts);
  } else {
    auto p = sandbox_path(qpath, who.home);
    if (!p)
      return http_error(c, error{errc::invalid_argument, "upload: path= is required: "
                                                           + p.err().message});
    files.push_back({*p, std::move(*body)});
  }
  auto st = std::make_shared<upload_state>();
  st->metadata = std::move(*metadata);
  st->left = files.size();
  st->written.resize(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    st->written[i] = files[i].path;
    // Made by the user first, so the write keeps it as owner (issue 27).
    auto path = files[i].path;
    prepare_owned_file(g, id, who, path, [g, c, id, st, f = std::move(files[i])]() mutable {
      write_one(g, c, id, st, std::move(f));
    });
  }
}

void health(const gateway_ref& g, const http_call& c, const std::string& id) {
  g.self->request(g.front, call_timeout, info_atom::value, id)
    .then(
      [c, id](sandbox_info& info) {
        // A paused sandbox that a call does not resume is not running (502,
        // as E2B answers; the SDK's isRunning() is false).
        bool paused_shut = info.state == sandbox_state::paused && !info.auto_resume;
        if (!paused_shut
            && (info.state == sandbox_state::running || info.state == sandbox_state::paused))
          return answer(c, 204, "");
        answer(c, 502, error_body(502, "sandbox " + id + " is " + to_string(info.state)));
      },
      [c, id](caf::error& err) {
        answer(c, 502, error_body(502, "sandbox " + id + ": " + from_caf(err).message));
      });
}

void serve_fs_call(const gateway_ref& g, const http_call& c, const std::string& id,
                   std::string_view method) {
  as_caller(g, c, id, {}, [g, c, id, m = std::string{method}](const envd_identity& who) {
    fs_call(g, c, id, m, who);
  }, false);
}

/// One Connect procedure of envd: its path, whether the server streams its
/// answer (Start, Connect, WatchDir) or answers once (a unary call, whose
/// content type is checked first), and what serves it (null: answered
/// `unimplemented`, naming it). Adding a procedure is adding a row.
struct procedure {
  std::string_view path;
  bool streaming;
  void (*serve)(const gateway_ref&, const http_call&, const std::string& id,
                std::string_view method);
};

constexpr procedure procedures[] = {
  {"/process.Process/Start", true,
   [](const gateway_ref& g, const http_call& c, const std::string& id, std::string_view) {
     as_caller(g, c, id, {}, [g, c, id](const envd_identity& who) {
       process_start(g, c, id, who);
     }, true);
   }},
  {"/process.Process/Connect", true,
   [](const gateway_ref& g, const http_call& c, const std::string& id, std::string_view) {
     process_connect(g, c, id);
   }},
  {"/process.Process/StreamInput", true, nullptr},
  {"/process.Process/List", false,
   [](const gateway_ref& g, const http_call& c, const std::string& id, std::string_view) {
     process_list(g, c, id);
   }},
  {"/process.Process/SendSignal", false,
   [](const gateway_ref& g, const http_call& c, const std::string& id, std::string_view) {
     process_signal(g, c, id);
   }},
  {"/process.Process/SendInput", false,
   [](const gateway_ref& g, const http_call& c, const std::string& id, std::string_view) {
     process_stdin(g, c, id, false);
   }},
  {"/process.Process/CloseStdin", false,
   [](const gateway_ref& g, const http_call& c, const std::string& id, std::string_view) {
     process_stdin(g, c, id, true);
   }},
  {"/process.Process/Update", false,
   [](const gateway_ref& g, const http_call& c, const std::string& id, std::string_view) {
     process_update(g, c, id);
   }},
  {"/filesystem.Filesystem/WatchDir", true,
   [](const gateway_ref& g, const http_call& c, const std::string& id, std::string_view) {
     as_caller(g, c, id, {}, [g, c, id](const envd_identity& who) { watch_dir(g, c, id, who); },
               true);
   }},
  {"/filesystem.Filesystem/Stat", false, serve_fs_call},
  {"/filesystem.Filesystem/ListDir", false, serve_fs_call},
  {"/filesystem.Filesystem/MakeDir", false, serve_fs_call},
  {"/filesystem.Filesystem/Move", false, serve_fs_call},
  {"/filesystem.Filesystem/Remove", false, serve_fs_call},
  {"/filesystem.Filesystem/CreateWatcher", false, nullptr},
  {"/filesystem.Filesystem/GetWatcherEvents", false, nullptr},
  {"/filesystem.Filesystem/RemoveWatcher", false, nullptr},
};

const procedure* find_procedure(std::string_view path) {
  for (auto& p : procedures)
    if (p.path == path)
      return &p;
  return nullptr;
}

} // namespace

void serve_envd(const gateway_ref& g, const http_call& c, const std::string& id,
                const std::string& path, const std::map<std::string, std::string>& query) {
  if (auto port = c->header("e2b-sandbox-port"); !port.empty() && port != envd_port) {
    answer(c, 502, error_body(502, "sandbox " + id + " port " + port.substr(0, 16)
                                     + ": dsec serves only envd (port " + envd_port + ")"));
    return;
  }
  const auto& m = c->method;
  if (path == "/health")
    return m == "GET" ? health(g, c, id) : answer(c, 405, error_body(405, "GET /health only"));
  if (path == "/files") {
    auto u = query.find("username");
    auto user = u == query.end() ? std::string{} : u->second;
    if (m == "GET")
      return as_caller(g, c, id, user, [g, c, id, query](const envd_identity& who) {
        read_file(g, c, id, query, who);
      }, false, true);
    if (m == "POST")
      return as_caller(g, c, id, user, [g, c, id, query](const envd_identity& who) {
        write_files(g, c, id, query, who);
      }, false, true);
    return answer(c, 405, error_body(405, "GET or POST /files only"));
  }
  if (auto* rpc = find_procedure(path)) {
    if (m != "POST")
      return answer(c, 405, connect_error("unimplemented", "connect: calls are POSTs"));
    if (!rpc->serve)
      return unimplemented(c, std::string{rpc->path.substr(1)}, rpc->streaming);
    if (!rpc->streaming)
      if (auto st = unary_content_type(c); !st)
        return rpc_error(c, st.err());
    return rpc->serve(g, c, id, rpc->path.substr(rpc->path.rfind('/') + 1));
  }
  answer(c, 404, connect_error("unimplemented", "no envd procedure " + path.substr(0, 200)));
}

} // namespace dsec::e2b
