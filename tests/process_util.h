// Running the capstep command from a test: where its binary is, starting it
// with its output in files, and the lines of that output. Shared by
// cli_test and data_parallel_mpi_test.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace capstep::test {

// $CAPSTEP_BINARY_DIR/capstep; without the variable, beside this test binary
// (both are built at the top of the build tree); "" when neither is known.
inline std::string capstep_binary() {
  if (const char* dir = std::getenv("CAPSTEP_BINARY_DIR"); dir && *dir) return std::string(dir) + "/capstep";
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : (self.parent_path() / "capstep").string();
}

// What a finished command gave: its exit code (128 + signal when killed) and output.
struct Outcome {
  int code = -1;
  std::string out, err;
};

// Starts argv (argv[0] found on PATH unless it has a slash) with stdin from
// /dev/null and stdout, stderr into the files `out` and `err`, in environment
// envp (this process's by default); throws when it cannot start.
inline pid_t spawn_process(std::vector<std::string> argv, const std::string& out, const std::string& err,
                           char* const* envp = environ) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
  return pid;
}

inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

}  // namespace capstep::test
