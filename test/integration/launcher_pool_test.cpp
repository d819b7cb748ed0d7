// Creates through several launchers at once (backends/container/
// launcher_pool.hpp): each sandbox still gets its own namespaces and cgroups,
// whichever launcher cloned its init, and nothing is left after destroy.
// DSEC_LAUNCHERS is checked before a node starts.
#include "container_fixture.hpp"

#include <cstdlib>
#include <sstream>
#include <set>

#include "backends/container/launcher_pool.hpp"

TEST_CASE("launchers: DSEC_LAUNCHERS takes 1 to 64, names itself otherwise",
          "[launcher_pool]") {
  ::unsetenv("DSEC_LAUNCHERS");
  auto unset = backends::launchers_env();
  REQUIRE(unset);
  CHECK(*unset == backends::default_launchers);
  struct row {
    const char* value;
    bool ok;
    size_t n;
  };
  for (auto r : {row{"1", true, 1}, row{"64", true, 64}, row{"0", false, 0},
                 row{"65", false, 0}, row{"", false, 0}, row{"4x", false, 0},
                 row{"-2", false, 0}}) {
    ::setenv("DSEC_LAUNCHERS", r.value, 1);
    auto got = backends::launchers_env();
    INFO("DSEC_LAUNCHERS=" << r.value);
    REQUIRE(bool(got) == r.ok);
    if (r.ok)
      CHECK(*got == r.n);
    else
      CHECK(got.err().message.find("DSEC_LAUNCHERS") != std::string::npos);
  }
  ::unsetenv("DSEC_LAUNCHERS");
}

TEST_CASE("launchers: concurrent creates get their own namespaces and cgroups, "
          "and leave nothing", "[launcher_pool][container]") {
  if (!is_root())
    return;
  // More creates in flight than launchers, so every lane is used and some wait.
  const int n = int(backends::default_launchers) * 3;
  std::vector<backends::create_params> params;
  for (int i = 0; i < n; ++i)
    params.push_back(w().params());
  std::vector<std::shared_ptr<backends::sandbox>> made(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      auto r = w().backend->create(params[i]);
      if (r)
        made[i] = *r;
    });
  for (auto& t : threads)
    t.join();
  std::set<std::string> net, pid, mnt, hosts;
  for (int i = 0; i < n; ++i) {
    REQUIRE(made[i]);
    auto r = run_sh(*made[i], "hostname; for n in net pid mnt; do readlink /proc/self/ns/$n; "
                              "done");
    INFO(r.stdout_data << r.stderr_data);
    REQUIRE(r.exit_code == 0);
    std::istringstream lines(r.stdout_data);
    std::string host, netns, pidns, mntns;
    std::getline(lines, host);
    std::getline(lines, netns);
    std::getline(lines, pidns);
    std::getline(lines, mntns);
    CHECK(host == params[i].id);
    hosts.insert(host), net.insert(netns), pid.insert(pidns), mnt.insert(mntns);
    // Its init is in its own group of every controller and of the v2 hierarchy.
    for (auto c : {"cpu", "memory", "pids", "freezer", "unified"}) {
      auto procs = sys::read_file("/sys/fs/cgroup/" + std::string(c) + "/dsec/" + node_id + "/"
                                  + params[i].id + "/cgroup.procs");
      INFO(c << " group of " << params[i].id);
      REQUIRE(procs);
      CHECK_FALSE(procs->empty());
    }
  }
  CHECK(hosts.size() == size_t(n));
  CHECK(net.size() == size_t(n));
  CHECK(pid.size() == size_t(n));
  CHECK(mnt.size() == size_t(n));
  for (int i = 0; i < n; ++i) {
    REQUIRE(made[i]->destroy());
    require_gone(params[i].id, params[i].dir, -1);
  }
}
