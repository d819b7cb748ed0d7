// Applying image layer tars (layers/tar_apply): OCI whiteouts, opaque
// directories, hardlinks and hostile paths, on tars generated here with
// libarchive's writer. Runs as any user (ownership is not kept).
#include <catch2/catch.hpp>

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "layers/tar_apply.hpp"
#include "sys/fs.hpp"
#include "temp_dir.hpp"

using namespace dsec;
using namespace dsec::layers;

namespace {

struct entry {
  char type; // 'f' file, 'd' dir, 'l' symlink, 'h' hardlink, 'c' char device
  std::string path;
  std::string data; // file content, or link target
  int mode = 0644;
};

void write_tar(const std::string& file, const std::vector<entry>& entries, bool gzip = false) {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (gzip)
    archive_write_add_filter_gzip(a);
  REQUIRE(archive_write_open_filename(a, file.c_str()) == ARCHIVE_OK);
  for (auto& e : entries) {
    archive_entry* ae = archive_entry_new();
    archive_entry_set_pathname(ae, e.path.c_str());
    archive_entry_set_perm(ae, e.mode);
    switch (e.type) {
    case 'f':
      archive_entry_set_filetype(ae, AE_IFREG);
      archive_entry_set_size(ae, static_cast<la_int64_t>(e.data.size()));
      break;
    case 'd':
      archive_entry_set_filetype(ae, AE_IFDIR);
      break;
    case 'l':
      archive_entry_set_filetype(ae, AE_IFLNK);
      archive_entry_set_symlink(ae, e.data.c_str());
      break;
    case 'h':
      archive_entry_set_filetype(ae, AE_IFREG);
      archive_entry_set_hardlink(ae, e.data.c_str());
      break;
    case 'c':
      archive_entry_set_filetype(ae, AE_IFCHR);
      archive_entry_set_rdev(ae, makedev(1, 3));
      break;
    }
    REQUIRE(archive_write_header(a, ae) == ARCHIVE_OK);
    if (e.type == 'f' && !e.data.empty())
      archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(ae);
  }
  archive_write_close(a);
  archive_write_free(a);
}

struct tmp_tree {
  test::temp_dir tmp{"h1-oci-unit"};
  std::string dir = tmp.path, root, outside;
  tmp_tree() {
    root = dir + "/root";
    outside = dir + "/outside";
    REQUIRE(::mkdir(root.c_str(), 0755) == 0);
    REQUIRE(::mkdir(outside.c_str(), 0755) == 0);
  }
  status apply(const std::vector<entry>& entries, apply_stats& st, bool gzip = false) {
    auto tar = dir + "/layer" + std::to_string(n++) + ".tar";
    write_tar(tar, entries, gzip);
    apply_options opts;
    opts.keep_owner = ::geteuid() == 0;
    return apply_tar(tar, root, "test layer", st, opts);
  }
  bool has(const std::string& rel) const { return sys::exists(root + "/" + rel); }
  int n = 0;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string{std::istreambuf_iterator<char>(in), {}};
}

} // namespace

TEST_CASE("tar_apply: whiteouts remove lower files, upper files win", "[oci]") {
  tmp_tree t;
  apply_stats st;
  REQUIRE(t.apply({{'d', "a", "", 0755}, {'f', "a/keep", "lower"}, {'f', "a/gone", "x"},
                   {'d', "b", "", 0755}, {'f', "b/x", "x"}, {'f', "top", "old"}},
                  st));
  REQUIRE(t.apply({{'f', "a/.wh.gone", ""}, {'f', ".wh.b", ""}, {'f', "top", "new"},
                   {'f', "c", "added"}, {'f', "c2", "same layer"}, {'f', ".wh.c2", ""}},
                  st));
  CHECK(t.has("a/keep"));
  CHECK_FALSE(t.has("a/gone"));
  CHECK_FALSE(t.has("b"));
  CHECK_FALSE(t.has("a/.wh.gone")); // whiteouts are never written
  CHECK(slurp(t.root + "/top") == "new");
  CHECK(slurp(t.root + "/c") == "added");
  CHECK(t.has("c2")); // a whiteout hides lower layers only
  CHECK(st.whiteouts == 3);
}

TEST_CASE("tar_apply: an opaque dir keeps only the top layer's content", "[oci]") {
  tmp_tree t;
  apply_stats st;
  REQUIRE(t.apply({{'d', "d", "", 0755}, {'f', "d/old1", "x"}, {'d', "d/sub", "", 0755},
                   {'f', "d/sub/old2", "x"}, {'f', "other", "kept"}},
                  st));
  // The marker in the middle: entries before and after it both survive.
  REQUIRE(t.apply({{'d', "d", "", 0750}, {'f', "d/new", "n"}, {'f', "d/.wh..wh..opq", ""},
                   {'f', "d/sub/new2", "n2"}},
                  st, /*gzip=*/true));
  CHECK(t.has("d/new"));
  CHECK(t.has("d/sub/new2"));
  CHECK_FALSE(t.has("d/old1"));
  CHECK_FALSE(t.has("d/sub/old2"));
  CHECK_FALSE(t.has("d/.wh..wh..opq"));
  CHECK(t.has("other"));
  CHECK(st.opaque_dirs == 1);
  struct stat sb;
  REQUIRE(::stat((t.root + "/d").c_str(), &sb) == 0);
  CHECK((sb.st_mode & 07777) == 0750);
}

TEST_CASE("tar_apply: hardlinks link inside the tree, never to host files", "[oci]") {
  tmp_tree t;
  apply_stats st;
  REQUIRE(t.apply({{'f', "f", "data", 0755}, {'h', "h", "f"}, {'l', "s", "f"}}, st));
  struct stat a, b;
  REQUIRE(::stat((t.root + "/f").c_str(), &a) == 0);
  REQUIRE(::stat((t.root + "/h").c_str(), &b) == 0);
  CHECK(a.st_ino == b.st_ino);
  CHECK(a.st_nlink == 2);
  CHECK((a.st_mode & 07777) == 0755);
  CHECK(st.hardlinks == 1);

  // An absolute target resolves inside the root, where there is no /etc.
  auto abs = t.apply({{'h', "h2", "/etc/passwd"}}, st);
  CHECK_FALSE(abs.ok());
  CHECK_FALSE(t.has("h2"));
  auto dotdot = t.apply({{'h', "h3", "../../../../etc/passwd"}}, st);
  REQUIRE_FALSE(dotdot.ok());
  CHECK(dotdot.err().message.find("..") != std::string::npos);
  CHECK_FALSE(t.has("h3"));
}

TEST_CASE("tar_apply: hostile paths never write outside the root", "[oci]") {
  tmp_tree t;
  apply_stats st;
  {
    auto s = t.apply({{'f', "../outside/pwned", "x"}}, st);
    REQUIRE_FALSE(s.ok());
    CHECK(s.err().code == errc::invalid_argument);
    CHECK(s.err().message.find("..") != std::string::npos);
  }
  // Absolute names land below the root (the leading '/' is dropped).
  REQUIRE(t.apply({{'f', "/abs/file", "x"}}, st));
  CHECK(t.has("abs/file"));
  // Symlinks planted by earlier entries resolve as if the root were "/".
  (void)t.apply({{'l', "rel", "../outside"}, {'f', "rel/pwned1", "x"}}, st);
  (void)t.apply({{'l', "absl", t.outside}, {'f', "absl/pwned2", "x"}}, st);
  REQUIRE(t.apply({{'l', "up", "/"}, {'f', "up/etc/pwned3", "x"}}, st));
  CHECK(t.has("etc/pwned3"));
  CHECK(sys::dir_is_empty(t.outside));
  // A whiteout through a symlink deletes nothing outside either.
  std::ofstream(t.outside + "/victim") << "v";
  (void)t.apply({{'l', "v", t.outside}, {'f', "v/.wh.victim", ""}}, st);
  (void)t.apply({{'l', "v2", "../../outside"}, {'f', "v2/.wh.victim", ""}}, st);
  CHECK(sys::exists(t.outside + "/victim"));
  // A symlink entry replaces a lower directory rather than writing through it.
  REQUIRE(t.apply({{'d', "dir", "", 0755}}, st));
  (void)t.apply({{'l', "dir", t.outside}, {'f', "dir/pwned4", "x"}}, st);
  CHECK_FALSE(sys::exists(t.outside + "/pwned4"));
  CHECK(sys::exists(t.outside + "/victim"));
}

TEST_CASE("tar_apply: device nodes are skipped and counted", "[oci]") {
  tmp_tree t;
  apply_stats st;
  REQUIRE(t.apply({{'d', "dev", "", 0755}, {'c', "dev/null", ""}, {'f', "ok", "x"}}, st));
  CHECK(st.skipped_devices == 1);
  CHECK_FALSE(t.has("dev/null"));
  CHECK(t.has("ok"));
}

TEST_CASE("tar_apply: a file that is not a tar is refused with a clear error", "[oci]") {
  tmp_tree t;
  auto bad = t.dir + "/garbage.tar";
  std::ofstream(bad) << std::string(4096, 'z') << "this is not a tar archive";
  apply_stats st;
  auto s = apply_tar(bad, t.root, "layer 1/1", st);
  REQUIRE_FALSE(s.ok());
  CHECK(s.err().code == errc::invalid_argument);
  CHECK(s.err().message.find("not a tar") != std::string::npos);
  CHECK(s.err().message.find("layer 1/1") != std::string::npos);
}
