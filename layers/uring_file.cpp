// uring_writer implementation (see uring_file.hpp). One mutex guards the ring:
// io_uring's submission and completion queues are single-producer and
// single-consumer, and writes are short, so contention is not worth avoiding.
#include "layers/uring_file.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

namespace dsec::layers {

struct uring_writer::impl {
  struct pending {
    uint64_t offset = 0;
    std::string data;
    size_t done = 0; // bytes already written (short writes resubmit the rest)
  };

  std::string path;
  int fd = -1;
  unsigned depth = 0;
  io_uring ring{};
  bool ring_ok = false; // io_uring_queue_init succeeded
  std::mutex mu;
  std::condition_variable queued_cv;
  std::map<uint64_t, pending> inflight;
  uint64_t next_id = 1;
  uint64_t bytes_queued = 0;
  uint64_t bytes_written = 0;
  error err;

  ~impl() {
    std::unique_lock<std::mutex> guard{mu};
    if (ring_ok) {
      while (!inflight.empty())
        if (!reap_one_locked())
          break; // the ring itself failed: nothing more will complete
      io_uring_queue_exit(&ring);
    }
    if (fd >= 0)
      ::close(fd);
  }

  void fail(error e) {
    if (!err)
      err = std::move(e);
  }

  /// Puts the (rest of the) write `id` on the ring and submits it.
  bool submit_locked(uint64_t id, pending& p) {
    auto* sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
      fail(internal_error("write " + path + ": io_uring submission queue full"));
      return false;
    }
    io_uring_prep_write(sqe, fd, p.data.data() + p.done,
                        static_cast<unsigned>(p.data.size() - p.done), p.offset + p.done);
    io_uring_sqe_set_data64(sqe, id);
    int rc = io_uring_submit(&ring);
    if (rc < 0) {
      fail(sys_error("write " + path + ": io_uring_submit", "", -rc));
      return false;
    }
    return true;
  }

  /// Waits for one completion and accounts for it. False if the ring broke.
  bool reap_one_locked() {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring, &cqe);
    if (rc == -EINTR)
      return true;
    if (rc < 0) {
      fail(sys_error("write " + path + ": io_uring_wait_cqe", "", -rc));
      return false;
    }
    auto id = io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    auto it = inflight.find(id);
    if (it == inflight.end())
      return true;
    auto& p = it->second;
    // A request still queued in io_uring's workers is cancelled when the
    // thread that submitted it exits: this (live) thread submits it again.
    if (res == -ECANCELED && !err)
      return submit_locked(id, p) || (inflight.erase(it), false);
    if (res < 0) {
      fail(sys_error("write " + path + " at offset " + std::to_string(p.offset), "", -res));
    } else if (res == 0) {
      fail(internal_error("write " + path + " at offset " + std::to_string(p.offset)
                          + ": no progress (0 bytes written)"));
    } else {
      p.done += static_cast<size_t>(res);
      if (p.done < p.data.size() && !err) // short write: the rest goes again
        return submit_locked(id, p) || (inflight.erase(it), false);
      bytes_written += p.data.size();
    }
    inflight.erase(it);
    return true;
  }
};

uring_writer::uring_writer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
uring_writer::uring_writer(uring_writer&&) noexcept = default;
uring_writer& uring_writer::operator=(uring_writer&&) noexcept = default;
uring_writer::~uring_writer() = default;

expected<uring_writer> uring_writer::create(const std::string& path, unsigned depth) {
  auto p = std::make_unique<impl>();
  p->path = path;
  p->depth = depth == 0 ? 1 : depth;
  int rc = io_uring_queue_init(p->depth, &p->ring, 0);
  if (rc < 0)
    return sys_error("write " + path + ": io_uring_queue_init", "", -rc);
  p->ring_ok = true;
  p->fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (p->fd < 0)
    return sys_error("create", path, errno, errno == ENOENT ? errc::not_found : errc::internal);
  return uring_writer{std::move(p)};
}

status uring_writer::write_at(uint64_t offset, std::string data) {
  auto& s = *impl_;
  std::unique_lock<std::mutex> guard{s.mu};
  if (s.err)
    return s.err;
  if (data.empty())
    return {};
  while (s.inflight.size() >= s.depth)
    if (!s.reap_one_locked())
      return s.err;
  auto id = s.next_id++;
  auto size = data.size();
  auto& p = s.inflight[id];
  p.offset = offset;
  p.data = std::move(data);
  if (!s.submit_locked(id, p)) {
    s.inflight.erase(id);
    return s.err;
  }
  s.bytes_queued += size;
  s.queued_cv.notify_all();
  return {};
}

status uring_writer::finish(uint64_t total_bytes, int64_t wait_ms) {
  auto& s = *impl_;
  std::unique_lock<std::mutex> guard{s.mu};
  bool all = s.queued_cv.wait_for(guard, std::chrono::milliseconds(wait_ms), [&] {
    return s.bytes_queued >= total_bytes || static_cast<bool>(s.err);
  });
  while (!s.inflight.empty())
    if (!s.reap_one_locked())
      break;
  if (s.err)
    return s.err;
  if (!all)
    return error{errc::timeout, "write " + s.path + ": only " + std::to_string(s.bytes_queued)
                                  + " of " + std::to_string(total_bytes) + " bytes arrived within "
                                  + std::to_string(wait_ms) + " ms"};
  if (s.bytes_written != total_bytes)
    return internal_error("write " + s.path + ": wrote " + std::to_string(s.bytes_written)
                          + " bytes, expected " + std::to_string(total_bytes));
  if (::fsync(s.fd) != 0)
    return sys_error("fsync", s.path, errno);
  return {};
}

uint64_t uring_writer::written() const {
  std::lock_guard<std::mutex> guard{impl_->mu};
  return impl_->bytes_written;
}

const std::string& uring_writer::path() const { return impl_->path; }

} // namespace dsec::layers
