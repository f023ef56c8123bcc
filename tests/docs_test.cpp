// The docs quote real code and real output, and fail loudly when they drift:
// every fenced block under a "<!-- quote: FILE -->" line must appear verbatim
// in FILE, and every fenced block under a "<!-- output -->" line is a
// transcript whose commands are run again: each "$ COMMAND" line must print
// the lines that follow it (standard output, then standard error) and exit 0,
// or with N where its last line ends in "(exit N)"; "[...]" in a line stands
// for any text. A number the docs quote from the tools is so one they print
// today.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "process_util.h"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string source_dir() {
  const char* d = std::getenv("CAPSTEP_SOURCE_DIR");
  return d ? d : ".";
}

void check_quotes(const std::string& doc_path) {
  const std::string doc = slurp(source_dir() + "/" + doc_path);
  ASSERT_FALSE(doc.empty()) << doc_path << " not found";
  const std::string tag = "<!-- quote: ";
  int quotes = 0;
  for (size_t at = doc.find(tag); at != std::string::npos; at = doc.find(tag, at + 1)) {
    size_t e = doc.find(" -->", at);
    std::string file = doc.substr(at + tag.size(), e - at - tag.size());
    size_t open = doc.find("```", e);
    size_t body = doc.find('\n', open) + 1;
    size_t close = doc.find("\n```", body);
    std::string block = doc.substr(body, close - body + 1);
    std::string src = slurp(source_dir() + "/" + file);
    ASSERT_FALSE(src.empty()) << file << " (quoted in " << doc_path << ") not found";
    EXPECT_NE(src.find(block), std::string::npos)
        << doc_path << ": the block quoted from " << file << " is no longer in it:\n" << block;
    ++quotes;
  }
  EXPECT_GT(quotes, 0) << doc_path << " quotes no code";
}

// One transcript line against one printed line; "[...]" matches any text.
bool line_matches(const std::string& want, const std::string& got) {
  const std::string any = "[...]";
  size_t w = 0, g = 0;
  bool anchored = true;  // the first piece must start the line
  while (true) {
    const size_t star = want.find(any, w);
    const std::string piece = want.substr(w, star == std::string::npos ? std::string::npos : star - w);
    if (star == std::string::npos) {  // the last piece must end the line
      if (anchored) return got.substr(g) == piece;
      return got.size() >= g + piece.size() && got.compare(got.size() - piece.size(), piece.size(), piece) == 0;
    }
    const size_t at = anchored ? (got.compare(g, piece.size(), piece) == 0 ? g : std::string::npos) : got.find(piece, g);
    if (at == std::string::npos) return false;
    g = at + piece.size();
    w = star + any.size();
    anchored = false;
  }
}

struct Ran {
  int code = -1;
  std::string out;  // standard output, then standard error
};

// Runs `command` with /bin/sh in `dir`, the capstep binary first on the PATH.
Ran run_shell(const std::string& command, const std::string& dir) {
  const std::string bin = std::filesystem::path(capstep::test::capstep_binary()).parent_path().string();
  const std::string out = dir + "/.stdout", err = dir + "/.stderr";
  const std::string script = "cd '" + dir + "' && PATH='" + bin + "':\"$PATH\" && " + command;
  const pid_t pid = capstep::test::spawn_process({"/bin/sh", "-c", script}, out, err);
  int status = 0;
  waitpid(pid, &status, 0);
  Ran r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out) + slurp(err);
  return r;
}

// The "<!-- output -->" transcripts of doc_path, run; returns how many commands.
int check_outputs(const std::string& doc_path) {
  const std::string doc = slurp(source_dir() + "/" + doc_path);
  EXPECT_FALSE(doc.empty()) << doc_path << " not found";
  const std::string tag = "<!-- output -->";
  const std::regex exit_note(R"(^(.*?)\s+\(exit (\d+)\)$)");
  int commands = 0;
  for (size_t at = doc.find(tag); at != std::string::npos; at = doc.find(tag, at + 1)) {
    const size_t open = doc.find("```", at);
    const size_t body = doc.find('\n', open) + 1;
    const size_t close = doc.find("\n```", body);
    const std::vector<std::string> lines = capstep::test::lines_of(doc.substr(body, close - body + 1));
    const std::string dir = std::filesystem::temp_directory_path() / ("capstep-docs-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);  // one per transcript: its commands may use each other's files
    for (size_t i = 0; i < lines.size();) {
      EXPECT_EQ(lines[i].rfind("$ ", 0), 0u) << doc_path << ": a transcript starts with a \"$ \" line: " << lines[i];
      const std::string command = lines[i].substr(2);
      std::vector<std::string> want;
      for (++i; i < lines.size() && lines[i].rfind("$ ", 0) != 0; ++i) want.push_back(lines[i]);
      int want_code = 0;
      std::smatch m;
      if (!want.empty() && std::regex_match(want.back(), m, exit_note)) {
        want_code = std::stoi(m[2]);
        want.back() = m[1];
      }
      const Ran r = run_shell(command, dir);
      ++commands;
      const std::vector<std::string> got = capstep::test::lines_of(r.out);
      bool same = got.size() == want.size();
      for (size_t k = 0; same && k < want.size(); ++k) same = line_matches(want[k], got[k]);
      EXPECT_TRUE(same) << doc_path << ": `" << command << "` prints\n" << r.out << "the docs say\n"
                        << [&] {
                             std::string w;
                             for (const std::string& l : want) w += l + "\n";
                             return w;
                           }();
      EXPECT_EQ(r.code, want_code) << doc_path << ": `" << command << "`";
    }
    std::filesystem::remove_all(dir);
  }
  return commands;
}

}  // namespace

TEST(Docs, TranscriptsPrintWhatTheToolsPrintToday) {
  if (!std::filesystem::exists(capstep::test::capstep_binary()))
    GTEST_SKIP() << "no capstep binary at '" << capstep::test::capstep_binary() << "' (set CAPSTEP_BINARY_DIR)";
  EXPECT_GE(check_outputs("docs/cli.md"), 10);
  EXPECT_GE(check_outputs("README.md"), 2);
  EXPECT_GE(check_outputs("docs/scaling.md"), 2);
  EXPECT_GE(check_outputs("docs/case-study.md"), 1);
}

// The transcript check itself: "[...]" and its anchors.
TEST(Docs, TranscriptLinesMatchWithTheirWildcards) {
  EXPECT_TRUE(line_matches("total 31 kernels", "total 31 kernels"));
  EXPECT_FALSE(line_matches("total 31 kernels", "total 32 kernels"));
  EXPECT_FALSE(line_matches("total 31 kernels", "total 31 kernels!"));
  EXPECT_TRUE(line_matches("no GPU ([...]) here", "no GPU (no driver: 35) here"));
  EXPECT_FALSE(line_matches("no GPU ([...]) here", "a GPU (no driver: 35) here"));
  EXPECT_FALSE(line_matches("no GPU ([...]) here", "no GPU (no driver: 35) there"));
  EXPECT_TRUE(line_matches("[...]", "anything"));
}

TEST(Docs, CaseStudyQuotesTheRealCode) { check_quotes("docs/case-study.md"); }
TEST(Docs, ApiGuideQuotesTheRealCode) { check_quotes("docs/api.md"); }
// The README shows examples/own_model/main.cpp in full.
TEST(Docs, ReadmeShowsTheOwnModelExampleInFull) {
  check_quotes("README.md");
  const std::string doc = slurp(source_dir() + "/README.md");
  const std::string tag = "<!-- quote: examples/own_model/main.cpp -->";
  const size_t at = doc.find(tag);
  ASSERT_NE(at, std::string::npos) << "README.md does not quote " << tag;
  const size_t body = doc.find('\n', doc.find("```", at)) + 1;
  const std::string block = doc.substr(body, doc.find("\n```", body) - body + 1);
  EXPECT_EQ(block, slurp(source_dir() + "/examples/own_model/main.cpp")) << "README.md shows only part of the example";
}
