// The guests' accelerator, by proof (see vm_accel.hpp).
#include "backends/vm/vm_accel.hpp"

#include <fcntl.h>
#include <linux/kvm.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>

#include "backends/vm/qemu.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

// The guests' CPU model and machine, no disks, no root: the kernel panics at
// mounting root, panic=-1 reboots at once, -no-reboot ends QEMU with 0.
// 128 MiB: with 64 the kernel stalls before the panic (measured, TCG).
std::vector<std::string> probe_argv(const kvm_probe_spec& s, const std::string& console) {
  return {s.qemu, "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
          "-name", "dsec-kvm-probe", "-M", "microvm,x-option-roms=off",
          "-accel", "kvm", "-cpu", "host", "-m", "128", "-smp", "1",
          "-kernel", s.kernel, "-append", "console=ttyS0 quiet panic=-1 reboot=t",
          "-serial", "file:" + console};
}

// What a cached probe result is valid for (see the header).
std::string cache_key(const kvm_probe_spec& s) {
  auto boot = sys::read_file("/proc/sys/kernel/random/boot_id");
  std::string k = "v1 boot=" + (boot ? boot->substr(0, boot->find('\n')) : std::string("?")) +
                  " deadline_ms=" + std::to_string(s.deadline_ms);
  for (auto* path : {&s.qemu, &s.kernel}) {
    struct stat st {};
    if (::stat(path->c_str(), &st) != 0)
      return {};
    k += " " + *path + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtime);
  }
  return k;
}

// "ok <seconds>" or "error <code> <message>" under the key line.
std::optional<expected<double>> read_cached(const kvm_probe_spec& s, const std::string& key) {
  auto text = sys::read_file(s.cache_path);
  if (!text || text->compare(0, key.size() + 1, key + "\n") != 0)
    return std::nullopt;
  std::istringstream in(text->substr(key.size() + 1));
  std::string kind;
  in >> kind;
  if (kind == "ok") {
    double took = 0;
    if (in >> took)
      return expected<double>(took);
  } else if (kind == "error") {
    int code = 0;
    std::string msg;
    if (in >> code && std::getline(in >> std::ws, msg) && !msg.empty())
      return expected<double>(error{static_cast<errc>(code), msg});
  }
  return std::nullopt;
}

void write_cached(const kvm_probe_spec& s, const std::string& key, const expected<double>& r) {
  auto slash = s.cache_path.find_last_of('/');
  if (slash != std::string::npos && slash > 0)
    (void)sys::make_dirs(s.cache_path.substr(0, slash), 0755);
  std::string text = key + "\n";
  if (r) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "ok %.3f\n", *r);
    text += buf;
  } else {
    auto msg = r.err().message;
    for (auto& c : msg)
      if (c == '\n')
        c = ' ';
    text += "error " + std::to_string(static_cast<int>(r.err().code)) + " " + msg + "\n";
  }
  (void)sys::write_file_atomic(s.cache_path, text, 0644, sys::durability::process_crash);
}

} // namespace

expected<accel_mode> parse_accel_mode(const char* value) {
  std::string v = value ? value : "";
  if (v.empty() || v == "auto")
    return accel_mode::automatic;
  if (v == "kvm")
    return accel_mode::kvm;
  if (v == "tcg")
    return accel_mode::tcg;
  return invalid_argument("DSEC_VM_ACCEL=\"" + v + "\" is not one of auto, kvm, tcg");
}

status kvm_ioctl_check(const std::string& device) {
  sys::unique_fd kvm{::open(device.c_str(), O_RDWR | O_CLOEXEC)};
  if (!kvm) {
    if (errno == ENOENT)
      return not_found("no " + device);
    return sys_error("open", device, errno, errc::unavailable);
  }
  int version = ::ioctl(kvm.get(), KVM_GET_API_VERSION, 0);
  if (version < 0)
    return sys_error("KVM_GET_API_VERSION", device, errno, errc::unavailable);
  if (version != KVM_API_VERSION)
    return unavailable(device + ": KVM API version " + std::to_string(version) + ", not " +
                       std::to_string(KVM_API_VERSION));
  sys::unique_fd vm{::ioctl(kvm.get(), KVM_CREATE_VM, 0)};
  if (!vm)
    return sys_error("KVM_CREATE_VM", device, errno, errc::unavailable);
  return {};
}

expected<double> kvm_boot_probe(const kvm_probe_spec& s, inflight_qemus& inflight) {
  if (auto st = sys::make_dirs(s.work_dir, 0700); !st)
    return st.err();
  auto console = s.work_dir + "/kvm-probe.console.log";
  auto log = s.work_dir + "/kvm-probe.qemu.log";
  ::unlink(console.c_str());
  ::unlink(log.c_str());
  struct cleanup {
    std::string a, b;
    ~cleanup() {
      ::unlink(a.c_str());
      ::unlink(b.c_str());
    }
  } files{console, log};
  sys::unique_fd null{::open("/dev/null", O_RDWR | O_CLOEXEC)};
  auto t0 = std::chrono::steady_clock::now();
  auto q = start_qemu(probe_argv(s, console), null.get(), null.get(), log);
  if (!q)
    return error{q.err().code, "kvm probe: start " + s.qemu + ": " + q.err().message};
  auto watch = inflight.watch(q->pidfd.get());
  pollfd pfd{q->pidfd.get(), POLLIN, 0};
  int left = s.deadline_ms;
  for (;;) {
    int n = ::poll(&pfd, 1, left);
    if (n >= 0 || errno != EINTR)
      break;
    left = s.deadline_ms - static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - t0).count());
    if (left < 0)
      left = 0;
  }
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  siginfo_t si{};
  bool exited = ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(q->pidfd.get()), &si,
                         WEXITED | WNOHANG) == 0 && si.si_pid != 0;
  if (!exited) {
    stop_qemu(*q);
    if (inflight.stopping())
      return inflight_qemus::stopping_error("kvm probe");
    return error{errc::timeout, "kvm probe did not reach the kernel panic within " +
                                  seconds(s.deadline_ms / 1000.0)};
  }
  q->pidfd.reset();
  if (inflight.stopping())
    return inflight_qemus::stopping_error("kvm probe");
  auto text = sys::read_file(console);
  bool panicked = text && text->find("Kernel panic") != std::string::npos;
  if (si.si_code == CLD_EXITED && si.si_status == 0 && panicked)
    return took;
  std::string how = si.si_code == CLD_EXITED ? "exit status " + std::to_string(si.si_status)
                                             : std::string("signal ") + ::strsignal(si.si_status);
  auto tail = log_tail(log, 200);
  return unavailable("kvm probe: qemu ended (" + how + ") after " + seconds(took) +
                     (panicked ? "" : " before the kernel panicked") +
                     (tail.empty() ? "" : ": " + tail));
}

// -- the node's choice ---------------------------------------------------------

vm_accel::vm_accel(accel_mode mode, kvm_probe_spec probe,
                   std::shared_ptr<inflight_qemus> inflight, std::string who)
  : mode_(mode), probe_(std::move(probe)), inflight_(std::move(inflight)), who_(std::move(who)) {
  if (mode_ == accel_mode::tcg) {
    s_->choice = {true, false, "DSEC_VM_ACCEL=tcg", {}};
    std::cout << who_ << ": vm accelerator tcg: DSEC_VM_ACCEL=tcg" << std::endl;
    return;
  }
  // Wakes creates waiting in wait() when the node stops mid-probe (weak:
  // the hook may outlive this object).
  inflight_->on_cancel([w = std::weak_ptr<shared>(s_)] {
    if (auto s = w.lock()) {
      std::lock_guard<std::mutex> g(s->m);
      s->cancelled = true;
      s->cv.notify_all();
    }
  });
  thread_ = std::thread([this] { run(); });
}

vm_accel::~vm_accel() {
  if (thread_.joinable())
    thread_.join(); // the probe has a deadline; cancel_all cuts it short
}

void vm_accel::run() {
  auto t0 = std::chrono::steady_clock::now();
  accel_choice c;
  c.decided = true;
  error why;
  if (auto st = kvm_ioctl_check(); !st) {
    why = st.err();
  } else {
    auto key = probe_.cache_path.empty() ? std::string() : cache_key(probe_);
    auto cached = key.empty() ? std::nullopt : read_cached(probe_, key);
    auto took = cached ? *cached : kvm_boot_probe(probe_, *inflight_);
    if (!cached && !key.empty() && !inflight_->stopping())
      write_cached(probe_, key, took);
    auto from = cached ? " (cached in " + probe_.cache_path + ")" : std::string();
    if (!took) {
      why = error{took.err().code, took.err().message + from};
    } else {
      c.kvm = true;
      c.reason = "kvm probe booted to the kernel panic in " + seconds(*took) + from;
    }
  }
  if (!c.kvm) {
    c.reason = why.message;
    if (mode_ == accel_mode::kvm) {
      c.kvm = true; // what was asked for; creates are refused
      c.refused = "DSEC_VM_ACCEL=kvm but KVM does not run guests here: " + why.message;
    }
  } else if (mode_ == accel_mode::kvm) {
    c.reason = "DSEC_VM_ACCEL=kvm; " + c.reason;
  }
  double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!inflight_->stopping())
    std::cout << who_ << ": vm accelerator " << (c.kvm ? "kvm" : "tcg") << ": "
              << (c.refused.empty() ? c.reason : c.refused + "; microvm and vm creates fail")
              << " (decided in " << seconds(spent) << ")" << std::endl;
  std::lock_guard<std::mutex> g(s_->m);
  s_->choice = std::move(c);
  s_->cv.notify_all();
}

accel_choice vm_accel::wait(int wait_ms) {
  std::unique_lock<std::mutex> g(s_->m);
  s_->cv.wait_for(g, std::chrono::milliseconds(wait_ms),
                  [&] { return s_->choice.decided || s_->cancelled; });
  if (s_->choice.decided)
    return s_->choice;
  accel_choice c;
  c.refused = s_->cancelled ? "node is stopping"
                         : "the accelerator probe did not finish within " +
                             seconds(wait_ms / 1000.0);
  return c;
}

accel_choice vm_accel::peek() const {
  std::lock_guard<std::mutex> g(s_->m);
  return s_->choice;
}

} // namespace dsec::backends
