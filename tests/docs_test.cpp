// The docs quote real code: every fenced block under a "<!-- quote: FILE -->"
// line must appear verbatim in FILE, so the docs fail loudly when they drift.
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <string>

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

}  // namespace

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
