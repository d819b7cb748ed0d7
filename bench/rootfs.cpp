// Building the busybox rootfs for the peer runs.
#include "bench/rootfs.hpp"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/spawn.hpp"

namespace dsec::bench {

namespace fs = std::filesystem;

namespace {

status write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f)
    return internal_error("build rootfs: write " + path.string() + " failed");
  return {};
}

status link_applets(const fs::path& root, const std::string& busybox) {
  auto list = run({busybox, "--list"});
  if (!list || list->exit_code != 0)
    return internal_error("build rootfs: '" + busybox + " --list' failed");
  std::istringstream in(list->output);
  std::string applet;
  while (std::getline(in, applet)) {
    if (applet.empty() || applet == "busybox" || applet.find('/') != std::string::npos)
      continue;
    std::error_code ec;
    fs::create_symlink("busybox", root / "bin" / applet, ec);
    if (ec && ec != std::errc::file_exists)
      return internal_error("build rootfs: symlink bin/" + applet + ": " + ec.message());
  }
  return {};
}

} // namespace

status build_busybox_rootfs(const std::string& dir) {
  auto busybox = fs::exists("/bin/busybox") ? std::string("/bin/busybox") : find_exe("busybox");
  if (busybox.empty())
    return unavailable("build rootfs " + dir + ": busybox not found (install busybox-static)");
  fs::path root(dir);
  std::error_code ec;
  for (auto sub : {"bin", "etc", "tmp", "proc", "dev", "sys", "root"})
    fs::create_directories(root / sub, ec);
  if (ec)
    return internal_error("build rootfs: mkdir in " + dir + ": " + ec.message());
  fs::permissions(root / "tmp", fs::perms::all | fs::perms::sticky_bit, ec);
  fs::copy_file(busybox, root / "bin" / "busybox", fs::copy_options::overwrite_existing, ec);
  if (ec)
    return internal_error("build rootfs: copy " + busybox + " to " + dir + "/bin: " + ec.message());
  fs::permissions(root / "bin" / "busybox", fs::perms(0755), ec);
  if (auto st = link_applets(root, (root / "bin" / "busybox").string()); !st)
    return st;
  if (auto st = write_text_file(root / "etc" / "passwd", "root:x:0:0:root:/root:/bin/sh\n"); !st)
    return st;
  return write_text_file(root / "etc" / "group", "root:x:0:\n");
}

} // namespace dsec::bench
