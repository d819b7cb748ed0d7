// E2B envd (e2b_gateway.hpp): the Connect RPCs of process.Process and
// filesystem.Filesystem with the JSON codec, GET/POST /files and GET /health,
// for the sandbox named by E2b-Sandbox-Id.
//
// A command (Start) runs as a dsec background command, so it has its pid at
// once, outlives the request like E2B's, and any peer can Connect to it, list
// it and signal it. Its output reaches the stream by waiting on the process
// (proc_atom with a wait): a command that ends answers at once, a running one
// sends what it printed every `poll_wait` and a keepalive when silent.
#include "actors/e2b_gateway.hpp"

#include <atomic>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "actors/e2b_codec.hpp"
#include "core/fs_entry_inspect.hpp"
#include "core/inspect.hpp"

namespace dsec::e2b {

namespace {

using namespace std::chrono_literals;

constexpr auto call_timeout = std::chrono::seconds(60);
/// How long one wait on a running command lasts: the most its output lags
/// behind (a command that ends is answered at once).
constexpr int64_t poll_wait_ms = 200;
/// A silent stream gets a keepalive event this often, well under undici's
/// 300 s body timeout.
constexpr auto keepalive_every = std::chrono::seconds(30);
/// Output sent per data event (base64 makes it a third larger).
constexpr size_t max_event_bytes = 1u << 20;

constexpr const char* connect_json = "application/connect+json";

// -- answers ----------------------------------------------------------------------

/// An envd HTTP error (GET/POST /files, /health): E2B's `{code, message}`.
void http_error(const http_call& c, const error& err) {
  int status = http_status(err.code);
  answer(c, status, error_body(status, err.message));
}

/// A unary Connect error.
void rpc_error(const http_call& c, const error& err) {
  auto code = connect_code(err.code);
  answer(c, connect_status(code), connect_error(code, err.message));
}

auto on_rpc_error(const http_call& c) {
  return [c](caf::error& err) { rpc_error(c, from_caf(err)); };
}

/// A streaming RPC that fails before its first message: a 200 with only the
/// end-of-stream envelope carrying the error, as the Connect protocol says.
void stream_error(const http_call& c, const error& err) {
  c->begin_stream(200, connect_json);
  c->write_chunk(end_of_stream(connect_code(err.code), err.message));
  c->end_stream();
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

/// One Start or Connect stream following a background command.
struct proc_stream {
  gateway_ref g;
  http_call c;
  std::string id;
  int32_t pid = 0;
  size_t out_sent = 0;
  size_t err_sent = 0;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  std::atomic<bool> gone{false};
};

void send_delta(proc_stream& s, const std::string& data, size_t& sent, int stream) {
  while (sent < data.size()) {
    auto n = std::min(max_event_bytes, data.size() - sent);
    s.c->write_chunk(envelope(0, data_event(stream, std::string_view{data}.substr(sent, n))));
    sent += n;
    s.last_write = std::chrono::steady_clock::now();
  }
}

void follow(std::shared_ptr<proc_stream> s, int64_t wait_ms) {
  auto bound = caf::duration{std::chrono::milliseconds(wait_ms) + call_timeout};
  s->g.self->request(s->g.front, bound, proc_atom::value, s->id, s->pid, wait_ms)
    .then(
      [s](background_process& p) {
        if (s->gone)
          return; // the client left; the command goes on
        send_delta(*s, p.result.stdout_data, s->out_sent, 1);
        send_delta(*s, p.result.stderr_data, s->err_sent, 2);
        if (!p.running) {
          if (p.result.timed_out) {
            s->c->write_chunk(end_of_stream("deadline_exceeded",
                                            "command " + std::to_string(s->pid)
                                              + " ran past its timeout and was killed"));
          } else {
            s->c->write_chunk(envelope(0, end_event(p.result)));
            s->c->write_chunk(end_of_stream());
          }
          return s->c->end_stream();
        }
        if (std::chrono::steady_clock::now() - s->last_write > keepalive_every) {
          s->c->write_chunk(envelope(0, keepalive_event()));
          s->last_write = std::chrono::steady_clock::now();
        }
        follow(s, poll_wait_ms);
      },
      [s](caf::error& err) {
        auto e = from_caf(err);
        s->c->write_chunk(end_of_stream(connect_code(e.code), e.message));
        s->c->end_stream();
      });
}

/// Opens the stream with the start event and follows the command.
void open_stream(const gateway_ref& g, const http_call& c, const std::string& id, int32_t pid) {
  auto s = std::make_shared<proc_stream>();
  s->g = g;
  s->c = c;
  s->id = id;
  s->pid = pid;
  c->on_disconnect([s] { s->gone = true; });
  c->begin_stream(200, connect_json);
  c->write_chunk(envelope(0, start_event(pid)));
  follow(s, poll_wait_ms);
}

/// The message of a streaming request: enveloped for connect+json.
expected<std::string> stream_message(const http_call& c) {
  auto ct = c->header("content-type");
  if (ct.rfind("application/connect+json", 0) != 0)
    return invalid_argument("connect: a streaming call needs Content-Type application/connect+json"
                            ", got \"" + ct.substr(0, 100) + "\"");
  return unwrap_request(c->body);
}

status unary_content_type(const http_call& c) {
  auto ct = c->header("content-type");
  if (ct.rfind("application/json", 0) != 0)
    return invalid_argument("connect: a unary call needs Content-Type application/json, got \""
                            + ct.substr(0, 100) + "\"");
  return {};
}

void process_start(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto msg = stream_message(c);
  if (!msg)
    return stream_error(c, msg.err());
  bool pty = false;
  bool keep_stdin = false;
  auto req = parse_start(*msg, pty, &keep_stdin);
  if (!req)
    return stream_error(c, req.err());
  if (pty)
    return unimplemented(c, "process.Process/Start with a pty", true);
  // The SDK's timeoutMs (default 60 s; 0 = none) bounds the command, as in E2B.
  auto tmo = c->header("connect-timeout-ms");
  if (!tmo.empty() && tmo.size() < 12 && tmo.find_first_not_of("0123456789") == std::string::npos)
    req->timeout_s = static_cast<double>(std::stoll(tmo)) / 1000.0;
  auto self = g.self;
  self->request(g.front, call_timeout, bgexec_atom::value, id, std::move(*req), keep_stdin)
    .then([g, c, id](background_process& p) { open_stream(g, c, id, p.pid); },
          [c](caf::error& err) { stream_error(c, from_caf(err)); });
}

void process_connect(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto msg = stream_message(c);
  if (!msg)
    return stream_error(c, msg.err());
  auto pid = parse_selector(*msg);
  if (!pid)
    return stream_error(c, pid.err());
  g.self->request(g.front, call_timeout, proc_atom::value, id, *pid, int64_t{0})
    .then([g, c, id, pid = *pid](background_process&) { open_stream(g, c, id, pid); },
          [c](caf::error& err) { stream_error(c, from_caf(err)); });
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

void fs_call(const gateway_ref& g, const http_call& c, const std::string& id,
             const std::string& method) {
  bool move = method == "Move";
  auto req = parse_fs(c->body, move);
  if (!req)
    return rpc_error(c, req.err());
  const char* op = method == "Stat"      ? fs_ops::stat
                   : method == "ListDir" ? fs_ops::list
                   : method == "MakeDir" ? fs_ops::mkdir
                   : move                ? fs_ops::move
                                         : fs_ops::remove;
  g.self->request(g.front, call_timeout, fsop_atom::value, id, std::string{op}, req->path, req->to,
                  req->depth)
    .then(
      [c, method](std::vector<fs_entry>& v) {
        if (method == "ListDir")
          return answer(c, 200, encode_entries(v));
        if (method == "Remove" || v.empty())
          return answer(c, 200, "{}");
        answer(c, 200, encode_entry_response(v.front()));
      },
      on_rpc_error(c));
}

/// One WatchDir stream: the directory is listed every `watch_every` and the
/// differences become create, write and remove events.
struct dir_watch {
  gateway_ref g;
  http_call c;
  std::string id;
  std::string path;
  int32_t depth = 1;
  /// path -> (size, mtime ns) of the last listing.
  std::map<std::string, std::pair<int64_t, int64_t>> seen;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::atomic<bool> gone{false};
};

constexpr auto watch_every = std::chrono::milliseconds(300);

std::map<std::string, std::pair<int64_t, int64_t>> snapshot(const std::vector<fs_entry>& v) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  for (auto& e : v)
    out[e.path] = {e.size, e.mtime_ns};
  return out;
}

void watch_step(std::shared_ptr<dir_watch> w) {
  w->g.self->request(w->g.front, call_timeout, fsop_atom::value, w->id, std::string{fs_ops::list},
                     w->path, std::string{}, w->depth)
    .then(
      [w](std::vector<fs_entry>& v) {
        if (w->gone)
          return;
        auto now = snapshot(v);
        auto rel = [&](const std::string& p) {
          return p.size() > w->path.size() ? p.substr(w->path == "/" ? 1 : w->path.size() + 1) : p;
        };
        auto emit = [&](const std::string& p, const char* type) {
          w->c->write_chunk(envelope(0, watch_event(rel(p), type)));
          w->last_write = std::chrono::steady_clock::now();
        };
        for (auto& [p, v] : now) {
          auto it = w->seen.find(p);
          if (it == w->seen.end())
            emit(p, "EVENT_TYPE_CREATE");
          else if (it->second != v)
            emit(p, "EVENT_TYPE_WRITE");
        }
        for (auto& [p, v] : w->seen)
          if (!now.count(p))
            emit(p, "EVENT_TYPE_REMOVE");
        w->seen = std::move(now);
        auto t = std::chrono::steady_clock::now();
        if (t >= w->deadline) {
          w->c->write_chunk(end_of_stream());
          return w->c->end_stream();
        }
        if (t - w->last_write > keepalive_every) {
          w->c->write_chunk(envelope(0, R"({"keepalive":{}})"));
          w->last_write = t;
        }
        w->g.self->delayed_send(w->g.self, watch_every, cont_atom::value,
                                continuation{[w] { watch_step(w); }});
      },
      [w](caf::error& err) {
        auto e = from_caf(err);
        w->c->write_chunk(end_of_stream(connect_code(e.code), e.message));
        w->c->end_stream();
      });
}

void watch_dir(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto msg = stream_message(c);
  if (!msg)
    return stream_error(c, msg.err());
  auto req = parse_watch(*msg);
  if (!req)
    return stream_error(c, req.err());
  auto w = std::make_shared<dir_watch>();
  w->g = g;
  w->c = c;
  w->id = id;
  w->path = req->path;
  w->depth = req->depth;
  auto tmo = c->header("connect-timeout-ms");
  if (!tmo.empty() && tmo.size() < 12 && tmo.find_first_not_of("0123456789") == std::string::npos
      && std::stoll(tmo) > 0)
    w->deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::stoll(tmo));
  g.self->request(g.front, call_timeout, fsop_atom::value, id, std::string{fs_ops::list}, w->path,
                  std::string{}, w->depth)
    .then(
      [w](std::vector<fs_entry>& v) {
        w->seen = snapshot(v);
        w->c->on_disconnect([w] { w->gone = true; });
        w->c->begin_stream(200, connect_json);
        w->c->write_chunk(envelope(0, R"({"start":{}})"));
        w->g.self->delayed_send(w->g.self, watch_every, cont_atom::value,
                                continuation{[w] { watch_step(w); }});
      },
      [c](caf::error& err) { stream_error(c, from_caf(err)); });
}

// -- GET/POST /files, /health -----------------------------------------------------------

void read_file(const gateway_ref& g, const http_call& c, const std::string& id,
               const std::map<std::string, std::string>& query) {
  auto it = query.find("path");
  auto path = sandbox_path(it == query.end() ? std::string_view{} : std::string_view{it->second});
  if (!path)
    return http_error(c, path.err());
  uint64_t max = g.ctx->config.max_file_bytes;
  g.self->request(g.front, call_timeout, rfile_atom::value, id, *path, max)
    .then([c](std::string& data) { answer(c, 200, std::move(data), "application/octet-stream"); },
          [c](caf::error& err) { http_error(c, from_caf(err)); });
}

struct upload_state {
  std::vector<std::string> written;
  size_t left = 0;
  bool failed = false;
};

void write_files(const gateway_ref& g, const http_call& c, const std::string& id,
                 const std::map<std::string, std::string>& query) {
  auto it = query.find("path");
  std::string qpath = it == query.end() ? std::string{} : it->second;
  auto ct = c->header("content-type");
  std::vector<upload> files;
  if (ct.rfind("multipart/form-data", 0) == 0) {
    if (!qpath.empty()) {
      auto p = sandbox_path(qpath);
      if (!p)
        return http_error(c, p.err());
      qpath = *p;
    }
    auto parts = parse_multipart(ct, c->body, qpath);
    if (!parts)
      return http_error(c, parts.err());
    files = std::move(*parts);
  } else {
    auto p = sandbox_path(qpath);
    if (!p)
      return http_error(c, error{errc::invalid_argument, "upload: path= is required: "
                                                           + p.err().message});
    files.push_back({*p, c->body});
  }
  auto st = std::make_shared<upload_state>();
  st->left = files.size();
  st->written.resize(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    st->written[i] = files[i].path;
    g.self->request(g.front, call_timeout, wfile_atom::value, id, files[i].path,
                    std::move(files[i].data))
      .then(
        [c, st](bool) {
          if (--st->left == 0 && !st->failed)
            answer(c, 200, encode_written(st->written));
        },
        [c, st](caf::error& err) {
          --st->left;
          if (!st->failed) {
            st->failed = true;
            http_error(c, from_caf(err));
          }
        });
  }
}

void health(const gateway_ref& g, const http_call& c, const std::string& id) {
  g.self->request(g.front, call_timeout, info_atom::value, id)
    .then(
      [c, id](sandbox_info& info) {
        if (info.state == sandbox_state::running || info.state == sandbox_state::paused)
          return answer(c, 204, "");
        answer(c, 502, error_body(502, "sandbox " + id + " is " + to_string(info.state)));
      },
      [c, id](caf::error& err) {
        answer(c, 502, error_body(502, "sandbox " + id + ": " + from_caf(err).message));
      });
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
    if (m == "GET")
      return read_file(g, c, id, query);
    if (m == "POST")
      return write_files(g, c, id, query);
    return answer(c, 405, error_body(405, "GET or POST /files only"));
  }
  constexpr std::string_view proc = "/process.Process/";
  constexpr std::string_view fs = "/filesystem.Filesystem/";
  std::string_view p = path;
  bool is_proc = p.rfind(proc, 0) == 0;
  bool is_fs = p.rfind(fs, 0) == 0;
  if ((is_proc || is_fs) && m != "POST")
    return answer(c, 405, connect_error("unimplemented", "connect: calls are POSTs"));
  if (is_proc) {
    auto method = std::string{p.substr(proc.size())};
    if (method == "Start")
      return process_start(g, c, id);
    if (method == "Connect")
      return process_connect(g, c, id);
    if (method == "WatchDir" || method == "StreamInput")
      return unimplemented(c, "process.Process/" + method, true);
    if (auto st = unary_content_type(c); !st)
      return rpc_error(c, st.err());
    if (method == "List")
      return process_list(g, c, id);
    if (method == "SendSignal")
      return process_signal(g, c, id);
    if (method == "SendInput" || method == "CloseStdin")
      return process_stdin(g, c, id, method == "CloseStdin");
    if (method == "Update")
      return unimplemented(c, "process.Process/" + method, false);
  } else if (is_fs) {
    auto method = std::string{p.substr(fs.size())};
    if (method == "WatchDir")
      return watch_dir(g, c, id);
    if (auto st = unary_content_type(c); !st)
      return rpc_error(c, st.err());
    if (method == "Stat" || method == "ListDir" || method == "MakeDir" || method == "Move"
        || method == "Remove")
      return fs_call(g, c, id, method);
    if (method == "CreateWatcher" || method == "GetWatcherEvents" || method == "RemoveWatcher")
      return unimplemented(c, "filesystem.Filesystem/" + method, false);
  }
  answer(c, 404, connect_error("unimplemented", "no envd procedure " + path.substr(0, 200)));
}

} // namespace dsec::e2b
