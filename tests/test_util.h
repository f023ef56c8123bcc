// Small helpers the test files share: the message of an expected Error, a
// temporary directory that removes itself, and a file's bytes.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capstep/array.h"
#include "backend/host/interpreter.h"
#include "capstep/ir.h"

namespace capstep::test {

// Runs f and returns the message of the capstep::Error it must throw.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a capstep::Error";
  return "";
}

// Expects f() to throw capstep::Error whose message contains every piece.
template <class F>
void expect_error(F&& f, const std::vector<std::string>& pieces) {
  try {
    f();
    ADD_FAILURE() << "no error thrown; expected one containing \"" << pieces.at(0) << "\"";
  } catch (const Error& e) {
    for (const std::string& piece : pieces) EXPECT_THAT(e.what(), ::testing::HasSubstr(piece));
  }
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "capstep-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path / name).string(); }
  // Writes `bytes` into a new file of the directory; returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return file(name);
  }
  size_t entries() const {
    return static_cast<size_t>(
        std::distance(std::filesystem::directory_iterator(path), std::filesystem::directory_iterator()));
  }
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The largest |a - b| over the largest |b| (a difference relative to the
// output's scale; the plain difference when b is all zeros).
inline double norm_diff(const Array& a, const Array& b) {
  double scale = 0, worst = 0;
  for (int64_t k = 0; k < b.numel(); ++k) scale = std::max(scale, std::fabs(b.get(k)));
  for (int64_t k = 0; k < b.numel(); ++k) {
    const double d = std::fabs(a.get(k) - b.get(k));
    if (!(d <= worst)) worst = d;
  }
  return scale > 0 ? worst / scale : worst;
}

// A parameter after one AdamW update against the reference's: it moves by
// lr m/(sqrt(v) + eps), and where a gradient is near eps that ratio is
// rounding noise, so one element may differ by up to 2 lr (a flipped sign).
// So: every element within 2 lr, and at most 1% of them further than
// `rounding` times the largest magnitude of `want`.
inline void expect_updated_param_close(const Array& got, const Array& want, double lr, double rounding,
                                       const std::string& where) {
  double scale = 0;
  for (int64_t k = 0; k < want.numel(); ++k) scale = std::max(scale, std::fabs(want.get(k)));
  int64_t off = 0;
  for (int64_t k = 0; k < got.numel(); ++k) {
    const double d = std::fabs(got.get(k) - want.get(k));
    EXPECT_LE(d, 2 * lr * (1 + 1e-3)) << where << " element " << k;
    off += d > rounding * scale;
  }
  EXPECT_LE(off * 100, got.numel()) << where << ": " << off << " of " << got.numel()
                                    << " elements off by more than rounding";
}

// The PJRT CPU plugin the PJRT tests run on: CAPSTEP_PJRT_PLUGIN (scripts/test
// sets it), else the one scripts/pjrt-plugin downloads into the checkout's
// .pjrt-plugin/. "" when there is none, with the reason in *why.
inline std::string pjrt_plugin(std::string* why) {
  if (const char* e = std::getenv("CAPSTEP_PJRT_PLUGIN"); e && *e) return e;
  const char* src = std::getenv("CAPSTEP_SOURCE_DIR");
  const std::string dir = src && *src ? src : "";
  for (const char* rel : {"/.pjrt-plugin/lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
                          "/.pjrt-plugin/fastatomstruct_xla_cpu/libpjrt_cpu.so"})
    if (!dir.empty() && std::filesystem::exists(dir + rel)) return dir + rel;
  *why = "no PJRT plugin: CAPSTEP_PJRT_PLUGIN is not set and scripts/pjrt-plugin has not downloaded one into " +
         (dir.empty() ? std::string("the checkout") : dir) + "/.pjrt-plugin";
  return "";
}

}  // namespace capstep::test
