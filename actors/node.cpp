// The node runtime. Signals are blocked in every thread and taken by the main
// thread with sigwait, so SIGTERM runs an orderly shutdown: stop taking
// requests, destroy every sandbox, unmount every layer, stop the actors.
#include "actors/node.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/atoms.hpp"
#include "actors/gateway.hpp"
#include "actors/lifecycle.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/wire_types.hpp"
#include "backends/container/container_backend.hpp"
#include "core/ids.hpp"
#include "layers/mount_cache.hpp"
#include "layers/store.hpp"
#include "sys/cgroup.hpp"
#include "sys/fs.hpp"
#include "sys/http_client.hpp"

namespace dsec {

namespace {

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string self_dir() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

/// The static init binary: $DSEC_INIT, or dsec-init beside this executable
/// (build tree: backends/dsec-init).
std::string find_init() {
  if (auto* env = ::getenv("DSEC_INIT"))
    return env;
  auto dir = self_dir();
  for (auto cand : {dir + "/dsec-init", dir + "/backends/dsec-init", dir + "/../backends/dsec-init",
                    dir + "/../libexec/dsec/dsec-init"})
    if (sys::exists(cand))
      return cand;
  return dir + "/dsec-init";
}

/// The node id: --node-id, else the one this state dir had, else a new one;
/// kept in <state_dir>/node-id so a restarted node keeps its id (sandbox ids
/// and cgroup paths name it).
expected<std::string> settle_node_id(const node_config& cfg) {
  auto path = cfg.state_dir + "/node-id";
  std::string id = cfg.node_id;
  if (id.empty()) {
    if (auto old = sys::read_file(path); old && !old->empty())
      id = old->substr(0, old->find('\n'));
    else
      id = make_node_id();
  }
  if (!valid_node_id(id))
    return invalid_argument("--node-id \"" + id + "\": use 1-32 characters of a-z, 0-9 and '-'");
  if (auto st = sys::write_file_atomic(path, id + "\n"); !st)
    return st.err();
  return id;
}

/// Sandboxes left by a node that died (kill -9, power loss) still hold
/// processes, mounts and cgroups: take each back through the backend and
/// destroy it. Blocking; runs before any actor starts.
void reap_stale_sandboxes(const node_context& ctx) {
  auto root = ctx.config.state_dir + "/sandboxes";
  DIR* d = ::opendir(root.c_str());
  if (!d)
    return;
  std::vector<std::string> ids;
  while (auto* e = ::readdir(d))
    if (e->d_name[0] != '.')
      ids.emplace_back(e->d_name);
  ::closedir(d);
  for (auto& id : ids) {
    auto dir = root + "/" + id;
    auto sb = ctx.container->recover(id, dir);
    status st = sb ? (*sb)->destroy() : status{sb.err()};
    if (!st) { // best effort: at least the overlay and the directory
      ::umount2((dir + "/rootfs").c_str(), MNT_DETACH);
      st = sys::remove_tree(dir);
    }
    std::cout << "dsec node " << ctx.config.node_id << ": reaped stale sandbox " << id
              << (st ? "" : ": " + st.err().message) << std::endl;
  }
}

expected<node_context_ptr> make_context(node_config cfg) {
  auto ctx = std::make_shared<node_context>();
  if (cfg.store_dir.empty())
    cfg.store_dir = cfg.state_dir + "/store";
  for (auto& d : {cfg.state_dir, cfg.state_dir + "/sandboxes", cfg.state_dir + "/mounts"})
    if (auto st = sys::make_dirs(d, 0700); !st)
      return st.err();
  auto id = settle_node_id(cfg);
  if (!id)
    return id.err();
  cfg.node_id = *id;
  auto store = layers::store::open(cfg.store_dir);
  if (!store)
    return store.err();
  auto mounts = std::make_shared<layers::mount_cache>(cfg.state_dir + "/mounts");
  if (auto adopted = mounts->adopt_existing(); !adopted)
    return adopted.err();
  ctx->mounts = mounts;
  ctx->layers = make_store_layer_source(std::make_shared<layers::store>(std::move(*store)), mounts);
  backends::container_config cc;
  cc.node_id = cfg.node_id;
  cc.init_path = find_init();
  if (!sys::exists(cc.init_path))
    return unavailable("node: the sandbox init binary " + cc.init_path
                       + " is missing (set DSEC_INIT)");
  ctx->container = backends::make_container_backend(cc);
  ctx->config = std::move(cfg);
  reap_stale_sandboxes(*ctx);
  mounts->release_unused(); // layer mounts nothing holds any more
  // Blocking work is mostly short syscalls and waits on processes; 16 threads
  // keep a burst of 16 creates in flight without queueing on 2 cores.
  ctx->pool = std::make_shared<sys::worker_pool>(16);
  ctx->started_at_ms = now_ms();
  return ctx;
}

void block_signals(sigset_t& set) {
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

/// Runs the actors until a signal or a dead child stops the supervisor.
int serve(caf::actor_system& sys, node_context& node, const node_context_ptr& ctx,
          const std::pair<std::string, uint16_t>& rest,
          const std::pair<std::string, uint16_t>& listen, sigset_t sigs) {
  auto sup = sys.spawn(node_supervisor, ctx);
  caf::scoped_actor self{sys};
  caf::actor lifecycle, gateway;
  self->request(sup, std::chrono::seconds(10), caf::get_atom::value)
    .receive([&](caf::actor& l, caf::actor& g) { lifecycle = l, gateway = g; },
             [&](caf::error&) {});
  auto server = start_http_server(rest.first, rest.second, node.config.max_body_bytes,
                                  [gateway](http_call c) {
                                    caf::anon_send(gateway, http_atom::value, std::move(c));
                                  });
  auto published = server ? sys.middleman().publish(lifecycle, listen.second,
                                                    listen.first.c_str(), true)
                          : caf::expected<uint16_t>{caf::sec::runtime_error};
  if (!server || !published) {
    std::cerr << "dsec node: "
              << (!server ? server.err().message
                          : "listen on " + node.config.listen + ": " + sys.render(published.error()))
              << "\n";
    caf::anon_send(sup, shutdown_atom::value);
    self->wait_for(sup);
    return 1;
  }
  std::cout << "dsec node " << node.config.node_id << " serving REST on " << rest.first << ":"
            << (*server)->port() << ", native on " << node.config.listen << ", state "
            << node.config.state_dir << std::endl;
  // The signal thread stops taking requests, then asks for an orderly stop.
  std::thread signals([&, sup] {
    int sig = 0;
    sigwait(&sigs, &sig);
    (*server)->stop();
    caf::anon_send(sup, shutdown_atom::value);
  });
  int rc = 0;
  self->monitor(sup);
  self->receive([&](caf::down_msg& dm) { rc = dm.reason ? 1 : 0; });
  pthread_kill(signals.native_handle(), SIGTERM); // wakes it if the stop came from inside
  signals.join();
  (*server)->stop();
  sys.middleman().unpublish(lifecycle, listen.second);
  return rc;
}

} // namespace

int run_node(node_config cfg) {
  sigset_t sigs;
  block_signals(sigs); // before any thread starts, so all inherit the mask
  auto rest = sys::parse_host_port(cfg.rest, true);
  auto listen = sys::parse_host_port(cfg.listen, true);
  if (!rest || !listen) {
    std::cerr << "dsec node: " << (rest ? listen.err() : rest.err()).message << "\n";
    return 2;
  }
  auto ctx = make_context(std::move(cfg));
  if (!ctx) {
    std::cerr << "dsec node: " << ctx.err().message << "\n";
    return 1;
  }
  auto& node = **ctx;
  caf::actor_system_config acfg;
  configure_native_protocol(acfg);
  int rc = 0;
  {
    caf::actor_system sys{acfg};
    rc = serve(sys, node, *ctx, *rest, *listen, sigs);
  }
  node.pool.reset();
  if (auto st = node.mounts->unmount_all(); !st)
    std::cerr << "dsec node: " << st.err().message << "\n";
  // The node's own cgroup parents (dsec/<node-id>); empty once every sandbox is
  // gone. The shared "dsec" parent goes too when no other node uses it.
  if (auto st = sys::open_cgroup_v1("/sys/fs/cgroup", "dsec/" + node.config.node_id)->remove(); !st)
    std::cerr << "dsec node: " << st.err().message << "\n";
  sys::prune_cgroup_v1("/sys/fs/cgroup", "dsec");
  return rc;
}

} // namespace dsec
