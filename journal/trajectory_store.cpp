// The trajectory log on disk (see trajectory_store.hpp).
#include "journal/trajectory_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "layers/digest.hpp"
#include "sys/fs.hpp"

namespace dsec::trajectory {

namespace {

std::string log_path(const std::string& dir) { return dir + "/log.ndjson"; }

std::string blob_path(const std::string& dir, const std::string& digest) {
  return dir + "/blobs/sha256-" + layers::digest_hex(digest);
}

status write_all(int fd, const std::string& data, const std::string& what) {
  size_t off = 0;
  while (off < data.size()) {
    auto n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return sys_error("append to trajectory log", what, errno);
    off += static_cast<size_t>(n);
  }
  return {};
}

/// Splits a log into its complete lines; `whole` = bytes up to the last newline.
std::vector<std::string_view> lines_of(const std::string& text, size_t& whole) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  whole = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string::npos)
      break; // a torn last line (host crash mid-write): not a record
    if (nl > pos)
      out.emplace_back(text.data() + pos, nl - pos);
    pos = nl + 1;
    whole = pos;
  }
  return out;
}

/// The seq of a line, without decoding all of it; -1 if it has none.
int64_t seq_of(std::string_view line) {
  static constexpr std::string_view key = "{\"seq\":";
  if (line.substr(0, key.size()) != key)
    return -1;
  int64_t v = 0;
  size_t i = key.size();
  if (i >= line.size() || line[i] < '0' || line[i] > '9')
    return -1;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9')
    v = v * 10 + (line[i++] - '0');
  return v;
}

expected<std::string> read_text(const store_options& o, const std::string& id) {
  auto text = sys::read_file(log_path(log_dir(o, id)));
  if (!text && text.err().code == errc::not_found)
    return not_found("trajectory of sandbox " + id + ": no log in " + o.dir);
  return text;
}

} // namespace

std::string log_dir(const store_options& o, const std::string& id) { return o.dir + "/" + id; }

sandbox_log::sandbox_log(store_options opts, std::string id, std::string node, sandbox_spec spec)
    : opts_(std::move(opts)), id_(std::move(id)), node_(std::move(node)), spec_(std::move(spec)),
      dir_(log_dir(opts_, id_)) {}

sandbox_log::~sandbox_log() {
  if (fd_ >= 0)
    ::close(fd_);
}

status sandbox_log::open() {
  if (opened_)
    return {};
  if (auto st = sys::make_dirs(dir_ + "/blobs", 0700); !st)
    return error{st.err().code, "trajectory log of " + id_ + ": " + st.err().message};
  auto path = log_path(dir_);
  auto text = sys::read_file(path);
  bool fresh = !text && text.err().code == errc::not_found;
  if (!text && !fresh)
    return text.err();
  size_t whole = 0;
  if (!fresh) {
    for (auto line : lines_of(*text, whole)) {
      auto r = decode(line);
      if (!r)
        continue; // a line this version cannot read stays, unused
      next_seq_ = std::max(next_seq_, r->seq + 1);
      if (r->kind == "exec" && !r->step.empty()) {
        for (auto* c : {&r->stdout_data, &r->stderr_data, &r->stdin_data})
          if (c->how != keep::inline_text)
            c->data.clear();
        steps_[r->step] = std::move(*r);
      }
    }
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0)
    return sys_error("open trajectory log", path, errno);
  if (!fresh && whole < text->size() && ::ftruncate(fd_, static_cast<off_t>(whole)) != 0)
    return sys_error("cut the torn end of trajectory log", path, errno);
  opened_ = true;
  if (fresh || next_seq_ == 0) {
    record spec;
    spec.kind = "spec";
    spec.id = id_;
    spec.node = node_;
    spec.spec = spec_;
    using namespace std::chrono;
    spec.at_ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
    if (auto r = append(std::move(spec)); !r) {
      opened_ = false;
      ::close(fd_);
      fd_ = -1;
      return r.err();
    }
  }
  return {};
}

status sandbox_log::store(content& c, std::string data) {
  c.size = static_cast<int64_t>(data.size());
  c.digest = layers::sha256_string(data);
  c.how = keep_for(data, opts_.inline_max, opts_.blob_max);
  if (c.how == keep::blob) {
    auto path = blob_path(dir_, c.digest);
    if (!sys::exists(path)) // content-addressed: stored once per log
      if (auto st = sys::write_file_atomic(path, data, 0600,
                                           opts_.fsync ? sys::durability::host_crash
                                                       : sys::durability::process_crash);
          !st)
        return st;
  }
  c.data = c.how == keep::inline_text ? std::move(data) : std::string{};
  return {};
}

expected<uint64_t> sandbox_log::append(record r) {
  if (!opened_ && r.kind != "spec")
    if (auto st = open(); !st)
      return st.err();
  r.seq = next_seq_;
  std::vector<content*> contents;
  if (r.kind == "exec" && r.background)
    contents = {&r.stdin_data};
  else if (r.kind == "exec")
    contents = {&r.stdin_data, &r.stdout_data, &r.stderr_data};
  else if (r.kind == "exit")
    contents = {&r.stdout_data, &r.stderr_data};
  else if (r.kind == "file")
    contents = {&r.file};
  else if (r.kind == "session_run") // issue 26 part 2: a shell session's run
    contents = {&r.stdout_data, &r.stderr_data};
  for (auto* c : contents)
    if (auto st = store(*c, std::move(c->data)); !st)
      return st.err();
  auto line = encode(r) + "\n";
  if (auto st = write_all(fd_, line, log_path(dir_)); !st)
    return st.err();
  if (opts_.fsync && ::fdatasync(fd_) != 0)
    return sys_error("fsync trajectory log", log_path(dir_), errno);
  ++next_seq_;
  if (r.kind == "exec" && !r.step.empty()) {
    reserved_.erase(r.step);
    steps_[r.step] = std::move(r);
  }
  return next_seq_ - 1;
}

step_verdict sandbox_log::check_step(const exec_request& req) {
  step_verdict v;
  if (auto st = open(); !st) {
    v.kind = step_verdict::failed;
    v.err = unavailable("exec step \"" + req.step + "\" in sandbox " + id_
                        + ": its trajectory log cannot be read: " + st.err().message);
    return v;
  }
  auto it = steps_.find(req.step);
  if (it == steps_.end()) {
    if (!reserved_.insert(req.step).second) {
      v.kind = step_verdict::conflict;
      v.err = conflict("step \"" + req.step + "\" of sandbox " + id_
                       + " is running now; send it again once it ended to get its result");
      return v;
    }
    v.kind = step_verdict::run;
    return v;
  }
  auto diff = step_differences(it->second, req, layers::sha256_string(req.stdin_data));
  if (!diff.empty()) {
    v.kind = step_verdict::conflict;
    v.err = step_conflict(id_, it->second, req, diff);
    return v;
  }
  auto rec = it->second;
  for (auto* c : {&rec.stdout_data, &rec.stderr_data})
    if (auto st = load_content(opts_, id_, *c); !st) {
      v.kind = step_verdict::failed;
      v.err = unavailable("replay step \"" + req.step + "\" of sandbox " + id_ + ": "
                          + st.err().message);
      return v;
    }
  v.kind = step_verdict::replay;
  v.result = result_of(rec);
  return v;
}

void sandbox_log::release(const std::string& step) { reserved_.erase(step); }

expected<std::string> read_log(const store_options& o, const std::string& id, int64_t since) {
  auto text = read_text(o, id);
  if (!text)
    return text.err();
  size_t whole = 0;
  std::string out;
  for (auto line : lines_of(*text, whole))
    if (seq_of(line) > since) {
      out.append(line.data(), line.size());
      out += '\n';
    }
  return out;
}

expected<std::vector<record>> read_records(const store_options& o, const std::string& id) {
  auto text = read_text(o, id);
  if (!text)
    return text.err();
  size_t whole = 0;
  std::vector<record> out;
  for (auto line : lines_of(*text, whole)) {
    auto r = decode(line);
    if (!r)
      return error{r.err().code, "trajectory of sandbox " + id + ": " + r.err().message};
    out.push_back(std::move(*r));
  }
  return out;
}

status load_content(const store_options& o, const std::string& id, content& c) {
  if (c.how == keep::inline_text)
    return {};
  if (c.how == keep::digest_only)
    return conflict("content " + c.digest + " (" + std::to_string(c.size)
                    + " bytes) was over the log's cap of " + std::to_string(o.blob_max)
                    + " bytes, so only its digest was kept");
  auto path = blob_path(log_dir(o, id), c.digest);
  auto data = sys::read_file(path);
  if (!data)
    return error{data.err().code, "trajectory blob " + path + ": " + data.err().message};
  if (layers::sha256_string(*data) != c.digest)
    return internal_error("trajectory blob " + path + ": content does not match its digest");
  c.data = std::move(*data);
  return {};
}

size_t prune(const store_options& o, int64_t now_ms) {
  size_t removed = 0;
  auto* d = ::opendir(o.dir.c_str());
  if (!d)
    return 0;
  std::vector<std::string> names;
  while (auto* e = ::readdir(d))
    if (e->d_name[0] != '.')
      names.emplace_back(e->d_name);
  ::closedir(d);
  for (auto& name : names) {
    auto dir = o.dir + "/" + name;
    struct stat sb {};
    if (::stat(log_path(dir).c_str(), &sb) != 0)
      continue;
    int64_t age = now_ms - (static_cast<int64_t>(sb.st_mtim.tv_sec) * 1000
                            + sb.st_mtim.tv_nsec / 1000000);
    if (age < o.keep_destroyed_ms)
      continue;
    bool destroyed = false;
    if (age < o.keep_orphan_ms) {
      // Only the last line can say "destroyed"; reading the whole log of an
      // old sandbox once per node start is cheap next to keeping it.
      auto text = sys::read_file(log_path(dir));
      size_t whole = 0;
      if (text) {
        auto lines = lines_of(*text, whole);
        destroyed = !lines.empty()
                    && lines.back().find("\"kind\":\"destroyed\"") != std::string_view::npos;
      }
      if (!destroyed)
        continue;
    }
    if (sys::remove_tree(dir))
      ++removed;
  }
  return removed;
}

void strand::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock{mu_};
    jobs_.push_back(std::move(job));
    if (running_)
      return;
    running_ = true;
  }
  pool_->post([self = shared_from_this()] { self->drain(); });
}

void strand::drain() {
  for (;;) {
    std::function<void()> job;
    {
      std::lock_guard<std::mutex> lock{mu_};
      if (jobs_.empty()) {
        running_ = false;
        return;
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

} // namespace dsec::trajectory
