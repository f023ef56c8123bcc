// The public headers (include/capstep/) are what an installed capstep offers:
// each must stand alone and name nothing internal. CMakeLists.txt compiles each
// on its own (target capstep_public_headers: one generated unit per header,
// with only capstep's usage requirements, so no src/ on the include path);
// these tests check that every header has its unit there, and that a header
// includes only the standard library and other public headers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

std::string source_dir() {
  const char* d = std::getenv("CAPSTEP_SOURCE_DIR");
  return d ? d : ".";
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The public headers by file name: include/capstep/*.h, and version.h, which
// CMake generates into the build tree (ctest runs the tests there).
std::set<std::string> public_headers() {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(source_dir()) / "include" / "capstep"))
    if (e.path().extension() == ".h") names.insert(e.path().filename().string());
  names.insert("version.h");
  return names;
}

}  // namespace

TEST(PublicHeaders, EachHasItsStandaloneUnit) {
  const fs::path units = fs::path("generated") / "public_headers";
  ASSERT_TRUE(fs::is_directory(units)) << "no " << units << " in the build tree " << fs::current_path();
  ASSERT_TRUE(fs::exists(fs::path("generated") / "include" / "capstep" / "version.h"));
  const std::set<std::string> headers = public_headers();
  EXPECT_GE(headers.size(), 15u);
  for (const std::string& h : headers) {
    const fs::path unit = units / (fs::path(h).stem().string() + ".cpp");
    ASSERT_TRUE(fs::exists(unit)) << "capstep/" << h << " has no unit compiled on its own (" << unit << ")";
    EXPECT_NE(slurp(unit).find("#include \"capstep/" + h + "\""), std::string::npos) << unit;
  }
}

TEST(PublicHeaders, IncludeOnlyTheStandardLibraryAndEachOther) {
  const std::set<std::string> headers = public_headers();
  const std::regex include_line(R"(^\s*#\s*include\s*([<"])([^>"]*)[>"])");
  int includes = 0;
  for (const std::string& h : headers) {
    if (h == "version.h") continue;  // generated, includes nothing
    std::istringstream text(slurp(fs::path(source_dir()) / "include" / "capstep" / h));
    std::string line;
    for (int n = 1; std::getline(text, line); ++n) {
      std::smatch m;
      if (!std::regex_search(line, m, include_line)) continue;
      ++includes;
      const std::string what = m[2];
      const std::string where = "capstep/" + h + ":" + std::to_string(n) + ": " + line;
      if (m[1] == "<") {
        // <vector>, <cstdint>: a standard header has neither a directory nor an extension.
        EXPECT_EQ(what.find_first_of("/."), std::string::npos) << where << " (not the standard library)";
      } else {
        EXPECT_EQ(what.rfind("capstep/", 0), 0u) << where << " (quoted includes name capstep/...)";
        EXPECT_TRUE(headers.count(what.substr(std::string("capstep/").size())))
            << where << " (not a public header: src/ stays internal)";
      }
    }
  }
  EXPECT_GT(includes, 0);
}
