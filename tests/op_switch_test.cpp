// Every switch over Op names each primitive (the build has -Werror=switch), so
// a primitive added to CAPSTEP_PRIMITIVES without a decision in each switch
// fails to build. A `default:` in such a switch would silently give the new
// primitive that branch; this test scans src/, tools/ and examples/ for one.
// Switches that only ask "is it one of these?" read the table's columns
// instead (op_kind, op_fuse, ...): the count of `case Op::` labels under src/
// is held under a ceiling, so that they do not grow back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string source_dir() {
  const char* d = std::getenv("CAPSTEP_SOURCE_DIR");
  return d ? d : ".";
}

// The text with comments, string and character literals blanked (newlines kept).
std::string code_only(const std::string& s) {
  std::string o = s;
  for (size_t i = 0; i < o.size(); ++i) {
    if (o.compare(i, 2, "//") == 0) {
      while (i < o.size() && o[i] != '\n') o[i++] = ' ';
    } else if (o.compare(i, 2, "/*") == 0) {
      const size_t e = o.find("*/", i + 2);
      const size_t end = e == std::string::npos ? o.size() : e + 2;
      for (; i < end; ++i)
        if (o[i] != '\n') o[i] = ' ';
      --i;
    } else if (o[i] == '"' || o[i] == '\'') {
      const char q = o[i];
      if (q == '\'' && i > 0 && std::isxdigit(static_cast<unsigned char>(o[i - 1]))) continue;  // 1'000
      if (q == '"' && i > 0 && o[i - 1] == 'R') {  // raw string R"d(...)d"
        const size_t p = o.find('(', i);
        const std::string close = ")" + o.substr(i + 1, p - i - 1) + "\"";
        const size_t e = o.find(close, p);
        const size_t end = e == std::string::npos ? o.size() : e + close.size();
        for (++i; i < end; ++i)
          if (o[i] != '\n') o[i] = ' ';
        --i;
        continue;
      }
      for (++i; i < o.size() && o[i] != q; ++i) {
        if (o[i] == '\\') o[i++] = ' ';
        if (i < o.size() && o[i] != '\n') o[i] = ' ';
      }
    }
  }
  return o;
}

// Line numbers of the `default:` labels that sit directly in a switch over Op:
// one whose condition names an `op` or whose own cases are `case Op::`.
std::vector<int> op_switch_defaults(const std::string& text) {
  const std::string s = code_only(text);
  std::vector<int> found;
  auto line_of = [&](size_t at) { return 1 + static_cast<int>(std::count(s.begin(), s.begin() + static_cast<long>(at), '\n')); };
  for (size_t at = s.find("switch"); at != std::string::npos; at = s.find("switch", at + 1)) {
    if (at > 0 && (std::isalnum(static_cast<unsigned char>(s[at - 1])) || s[at - 1] == '_')) continue;
    const size_t open_paren = s.find('(', at), body = s.find('{', at);
    if (open_paren == std::string::npos || body == std::string::npos) continue;
    const std::string cond = s.substr(open_paren, body - open_paren);
    bool over_op = false;
    for (size_t c = cond.find("op"); c != std::string::npos; c = cond.find("op", c + 1)) {
      const bool left = c == 0 || !(std::isalnum(static_cast<unsigned char>(cond[c - 1])) || cond[c - 1] == '_');
      const bool right = c + 2 >= cond.size() || !(std::isalnum(static_cast<unsigned char>(cond[c + 2])) || cond[c + 2] == '_');
      over_op = over_op || (left && right);
    }
    // walk the body at depth 1 (the switch's own labels, not nested switches')
    int depth = 0;
    std::vector<size_t> defaults;
    for (size_t i = body; i < s.size(); ++i) {
      if (s[i] == '{') ++depth;
      else if (s[i] == '}' && --depth == 0) break;
      else if (s.compare(i, 6, "switch") == 0) {  // a nested switch: skip its body
        const size_t b = s.find('{', i);
        int d = 0;
        for (i = b; i < s.size(); ++i)
          if (s[i] == '{') ++d;
          else if (s[i] == '}' && --d == 0) break;
      } else if (s.compare(i, 9, "case Op::") == 0) over_op = true;
      else if (s.compare(i, 8, "default:") == 0 || s.compare(i, 8, "default ") == 0) defaults.push_back(i);
    }
    if (over_op)
      for (size_t d : defaults) found.push_back(line_of(d));
  }
  return found;
}

TEST(OpSwitch, TheScanFindsADefault) {
  EXPECT_EQ(op_switch_defaults("int f(Op op) {\n  switch (op) {\n    case Op::add: return 1;\n    default: return 0;\n  }\n}\n"),
            std::vector<int>{4});
  EXPECT_EQ(op_switch_defaults("switch (e.op) {\n  default: break;\n}\n"), std::vector<int>{2});
  // a nested switch over something else may keep its default; comments and strings are not code
  EXPECT_TRUE(op_switch_defaults("switch (e.op) {\n  case Op::add:\n    switch (t) { case 1: break; default: break; }\n"
                                 "    break;\n  // default: here\n  case Op::log: f(\"default:\"); break;\n}\n")
                  .empty());
  EXPECT_TRUE(op_switch_defaults("switch (dir) {\n  case 0: return 1;\n  default: return 2;\n}\n").empty());
}

TEST(OpSwitch, NoDefaultInASwitchOverOp) {
  namespace fs = std::filesystem;
  int files = 0;
  for (const char* top : {"src", "tools", "examples", "include"}) {
    const fs::path root = fs::path(source_dir()) / top;
    ASSERT_TRUE(fs::exists(root)) << root;
    for (const auto& f : fs::recursive_directory_iterator(root)) {
      const std::string ext = f.path().extension().string();
      if (!f.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh")) continue;
      std::ifstream in(f.path());
      std::stringstream ss;
      ss << in.rdbuf();
      ++files;
      for (int line : op_switch_defaults(ss.str()))
        ADD_FAILURE() << f.path().string() << ":" << line
                      << ": a default: in a switch over Op; name each primitive instead, so that a new one fails to build";
    }
  }
  EXPECT_GT(files, 50);
}

// The number of `case Op::` texts in the files under src/, as
// `grep -o 'case Op::' -r src | wc -l` counts them. The exhaustive switches
// are the ops' own code (shape rule, VJP, kernels, lowering); a unary or
// binary primitive's case comes from its sub-table (CAPSTEP_CASE_OP).
constexpr int kCaseOpCeiling = 300;

TEST(OpSwitch, CaseLabelsUnderTheCeiling) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(source_dir()) / "src";
  ASSERT_TRUE(fs::exists(root)) << root;
  int total = 0;
  std::vector<std::pair<int, std::string>> per_file;
  for (const auto& f : fs::recursive_directory_iterator(root)) {
    if (!f.is_regular_file()) continue;
    std::ifstream in(f.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    int n = 0;
    for (size_t at = text.find("case Op::"); at != std::string::npos; at = text.find("case Op::", at + 9)) ++n;
    total += n;
    if (n > 0) per_file.emplace_back(n, fs::relative(f.path(), root).string());
  }
  std::sort(per_file.rbegin(), per_file.rend());
  std::string listing;
  for (const auto& [n, name] : per_file) listing += "  " + std::to_string(n) + " src/" + name + "\n";
  std::printf("[op switch] %d `case Op::` labels under src/ (ceiling %d)\n%s", total, kCaseOpCeiling, listing.c_str());
  EXPECT_LE(total, kCaseOpCeiling) << "`case Op::` labels under src/:\n"
                                   << listing
                                   << "a switch that only sorts ops into \"this one\" and \"not this one\" "
                                      "should read the primitive table (op_kind, op_fuse, is_elementwise, ...)";
  EXPECT_GT(total, 0);
}

}  // namespace
