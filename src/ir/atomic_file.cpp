// Atomic file replacement: the previous file at `path` survives any failure,
// and a crash at any instant leaves either the old or the new file there.
//
// temp file in the same directory (rename is atomic only within a file system)
//   -> write everything -> fsync (data on disk before the name points at it)
//   -> rename over the target -> fsync the directory (the rename itself durable)
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capstep/files.h"
#include "capstep/ir.h"

namespace capstep {
namespace {

std::mutex hook_mutex;
std::function<void(const char*)> hook;

void stage(const char* name) {
  std::function<void(const char*)> h;
  {
    std::lock_guard<std::mutex> lock(hook_mutex);
    h = hook;
  }
  if (h) h(name);
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes all of [p, p+n), retrying short writes and interrupted calls.
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "host";
  std::string h(buf);
  for (char& c : h)
    if (c == '.' || c == '/') c = '_';
  return h;
}

// Saves killed mid-write (SIGKILL, OOM killer) leave "<name>.tmp.<host>.<pid>.<n>"
// beside the target. Remove those of this host whose process no longer runs,
// so they do not pile up over a long run. Best effort: errors are ignored.
void remove_stale_temporaries(const std::string& path, const std::string& host) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp." + host + ".";
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789") != dot) continue;
    const long pid = std::strtol(rest.substr(0, dot).c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;   // still running
    std::error_code ignored;
    fs::remove(it->path(), ignored);
  }
}

}  // namespace

void set_atomic_write_hook_for_testing(std::function<void(const char* stage)> h) {
  std::lock_guard<std::mutex> lock(hook_mutex);
  hook = std::move(h);
}

namespace {

// The target must be a file name, not a directory; "" when it is fine.
std::string target_problem(const std::string& path) {
  if (path.empty() || path.back() == '/') return "not a file name";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "it is a directory";
  return "";
}

// "<path>.tmp.<host>.<pid>.<n>", unique within this process.
std::string temporary_name(const std::string& path, const std::string& host) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + host + "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

void check_writable(const std::string& path) {
  const std::string prefix = "cannot save '" + path + "': ";
  if (const std::string p = target_problem(path); !p.empty()) throw Error(prefix + p);
  // Create and remove the temporary a save would create: that proves the
  // directory exists and takes new files (permissions, a read-only mount).
  const std::string tmp = temporary_name(path, host_name());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw Error(prefix + "cannot create a file in directory '" + directory_of(path) + "': " + std::strerror(err));
  }
  ::close(fd);
  ::unlink(tmp.c_str());
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::string prefix = "cannot save '" + path + "': ";
  if (const std::string p = target_problem(path); !p.empty()) throw Error(prefix + p);

  const std::string host = host_name();
  const std::string tmp = temporary_name(path, host);
  int fd = -1;
  bool renamed = false;
  auto sys_fail = [&](const std::string& what) {
    const int err = errno;
    throw Error(prefix + what + ": " + std::strerror(err));
  };
  try {
    stage("open");
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) sys_fail("cannot create the temporary file '" + tmp + "'");
    const size_t half = bytes.size() / 2;
    if (!write_all(fd, bytes.data(), half)) sys_fail("cannot write '" + tmp + "'");
    stage("write-half");
    if (!write_all(fd, bytes.data() + half, bytes.size() - half)) sys_fail("cannot write '" + tmp + "'");
    stage("fsync");
    if (::fsync(fd) != 0) sys_fail("cannot fsync '" + tmp + "'");
    const int closing = fd;
    fd = -1;
    if (::close(closing) != 0) sys_fail("cannot close '" + tmp + "'");
    stage("rename");
    if (::rename(tmp.c_str(), path.c_str()) != 0) sys_fail("cannot rename '" + tmp + "' over it");
    renamed = true;
    stage("fsync-dir");
    const std::string dir = directory_of(path);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) sys_fail("cannot open directory '" + dir + "' to fsync it");
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    // Some file systems cannot fsync a directory (EINVAL); the data is safe.
    if (rc != 0 && err != EINVAL) {
      errno = err;
      sys_fail("cannot fsync directory '" + dir + "'");
    }
  } catch (...) {
    if (fd >= 0) ::close(fd);
    if (!renamed) ::unlink(tmp.c_str());
    throw;
  }
  remove_stale_temporaries(path, host);
}

}  // namespace capstep
