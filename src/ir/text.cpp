// The Program's text form: what a person reads and diffs, and what parse_text
// reads back exactly (constants print with 17 significant digits, which round
// trips every f64 and therefore every f32, i32 and i1 value).
//
//   program @main {
//     input "x" %0 : f32[4,8]
//     %1 = multiply(%0, %0) : f32[4,8]
//     %2 = reduce_sum(%1) {dims=[0,1]} : f32[]
//     output "loss" %2
//     alias "x'" <- "x"
//   }
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "capstep/ir.h"

namespace capstep {
namespace {

std::string quote(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string list(const std::vector<int64_t>& v) { return shape_str(v); }

}  // namespace

std::string index_error_text(const Program& p, int eqn, int64_t position, int64_t value) {
  const Eqn& e = p.eqns.at(static_cast<size_t>(eqn));
  const Type& it = p.type(e.inputs.at(1));
  Shape coord(it.shape.size(), 0);
  int64_t rest = position;
  for (size_t a = it.shape.size(); a-- > 0;) {
    coord[a] = it.shape[a] ? rest % it.shape[a] : 0;
    rest = it.shape[a] ? rest / it.shape[a] : 0;
  }
  std::string of = "the indices " + it.str();
  for (const NamedValue& in : p.inputs)
    if (in.value == e.inputs[1]) of += " (input " + quote(in.name) + ")";
  return std::string(op_name(e.op)) + ": index " + std::to_string(value) + " at position " + std::to_string(position) +
         " " + shape_str(coord) + " of " + of + " is out of range [0, " + std::to_string(p.type(e.inputs[0]).shape.at(0)) +
         ") (equation " + std::to_string(eqn) + ": " + eqn_text(p, e) + ")";
}

std::string eqn_text(const Program& p, const Eqn& e) {
  std::ostringstream o;
  o << '%' << e.out << " = " << op_name(e.op) << '(';
  for (size_t i = 0; i < e.inputs.size(); ++i) o << (i ? ", %" : "%") << e.inputs[i];
  o << ')';
  const Attrs& a = e.attrs;
  std::ostringstream in;  // the attributes, between the braces
  switch (e.op) {
    case Op::constant: {
      in << "literal=[";
      for (size_t i = 0; i < a.literal.size(); ++i) in << (i ? "," : "") << num(a.literal[i]);
      in << "]";
      break;
    }
    case Op::iota: case Op::attention_grad: case Op::concatenate: in << "axis=" << a.axis; break;
    case Op::adamw: {  // axis: which result; literal: beta1, beta2, eps
      in << "axis=" << a.axis << ", literal=[";
      for (size_t i = 0; i < a.literal.size(); ++i) in << (i ? "," : "") << num(a.literal[i]);
      in << "]";
      break;
    }
    case Op::slice:
      in << "starts=" << list(a.starts) << ", limits=" << list(a.limits) << ", strides=" << list(a.strides);
      break;
    case Op::pad: in << "lows=" << list(a.lows) << ", highs=" << list(a.highs); break;
    case Op::compare: in << "cmp=" << cmp_name(a.cmp); break;
    case Op::broadcast_in_dim: case Op::transpose: case Op::reduce_sum: case Op::reduce_max:
      in << "dims=" << list(a.dims);
      break;
    case Op::dot_general:
      in << "lhs_batch=" << list(a.lhs_batch) << ", rhs_batch=" << list(a.rhs_batch)
         << ", lhs_contract=" << list(a.lhs_contract) << ", rhs_contract=" << list(a.rhs_contract);
      break;
    CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP)
    CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
    case Op::select: case Op::convert: case Op::reshape: case Op::gather_rows: case Op::scatter_add_rows:
    case Op::attention: case Op::all_reduce:
      break;
  }
  if (a.no_grad) in << (in.tellp() > 0 ? ", " : "") << "no_grad=1";
  if (a.region >= 0) in << (in.tellp() > 0 ? ", " : "") << "region=" << a.region;
  if (in.tellp() > 0) o << " {" << in.str() << '}';
  o << " : " << p.type(e.out).str();
  return o.str();
}

std::string to_text(const Program& p) {
  std::ostringstream o;
  o << "program @" << p.name << " {\n";
  for (const NamedValue& in : p.inputs) o << "  input " << quote(in.name) << " %" << in.value << " : " << p.type(in.value).str() << '\n';
  for (const Eqn& e : p.eqns) o << "  " << eqn_text(p, e) << '\n';
  for (const NamedValue& out : p.outputs) o << "  output " << quote(out.name) << " %" << out.value << '\n';
  for (const Alias& a : p.aliases)
    o << "  alias " << quote(p.outputs[static_cast<size_t>(a.output)].name) << " <- "
      << quote(p.inputs[static_cast<size_t>(a.input)].name) << '\n';
  o << "}\n";
  return o.str();
}

// ---- reader -------------------------------------------------------------------
namespace {

class Reader {
 public:
  explicit Reader(const std::string& t) : s_(t) {}

  [[noreturn]] void fail(const std::string& why) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    throw Error("program text " + std::to_string(line) + ":" + std::to_string(col) + ": " + why);
  }
  void skip() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      else if (s_[pos_] == '#') { while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_; }
      else break;
    }
  }
  bool peek(char c) { skip(); return pos_ < s_.size() && s_[pos_] == c; }
  bool accept(char c) { if (peek(c)) { ++pos_; return true; } return false; }
  void expect(char c) { if (!accept(c)) fail(std::string("expected '") + c + "'"); }
  std::string word() {
    skip();
    size_t b = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' || s_[pos_] == '.')) ++pos_;
    if (b == pos_) fail("expected a word");
    return s_.substr(b, pos_ - b);
  }
  void keyword(const char* k) { if (word() != k) fail(std::string("expected '") + k + "'"); }
  bool at_word(const char* k) {
    skip();
    size_t n = std::char_traits<char>::length(k);
    return s_.compare(pos_, n, k) == 0 && (pos_ + n >= s_.size() || !std::isalnum(static_cast<unsigned char>(s_[pos_ + n])));
  }
  std::string quoted() {
    skip();
    if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a quoted name");
    ++pos_;
    std::string r;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated name");
      char c = s_[pos_++];
      if (c == '"') break;
      if (c == '\\') {
        if (pos_ >= s_.size()) fail("unterminated name");
        c = s_[pos_++];
      }
      r += c;
    }
    return r;
  }
  int64_t integer() {
    skip();
    const char* b = s_.c_str() + pos_;
    char* e = nullptr;
    errno = 0;
    long long v = std::strtoll(b, &e, 10);
    if (e == b || errno) fail("expected an integer");
    pos_ += static_cast<size_t>(e - b);
    return v;
  }
  double number() {
    skip();
    const char* b = s_.c_str() + pos_;
    char* e = nullptr;
    double v = std::strtod(b, &e);
    if (e == b) fail("expected a number");
    pos_ += static_cast<size_t>(e - b);
    return v;
  }
  int value() {
    expect('%');
    int64_t v = integer();
    if (v < 0 || v > (1 << 30)) fail("value id out of range");
    return static_cast<int>(v);
  }
  std::vector<int64_t> int_list() {
    expect('[');
    std::vector<int64_t> r;
    if (accept(']')) return r;
    do r.push_back(integer()); while (accept(','));
    expect(']');
    return r;
  }
  Type type() {
    std::string w = word();
    DType d;
    try { d = parse_dtype(w); } catch (const Error& e) { fail(e.what()); }
    Shape sh = int_list();
    Type t{d, sh};
    try { validate_type(t, "type"); } catch (const Error& e) { fail(e.what()); }
    return t;
  }

  Program program() {
    Program p;
    keyword("program");
    expect('@');
    p.name = word();
    expect('{');
    auto define = [&](int id, const Type& t) {
      if (id != p.num_values()) fail("values must be numbered in order: expected %" + std::to_string(p.num_values()));
      p.types.push_back(t);
    };
    while (!accept('}')) {
      if (at_word("input")) {
        keyword("input");
        std::string nm = quoted();
        int id = value();
        expect(':');
        define(id, type());
        p.inputs.push_back({nm, id});
      } else if (at_word("output")) {
        keyword("output");
        std::string nm = quoted();
        p.outputs.push_back({nm, value()});
      } else if (at_word("alias")) {
        keyword("alias");
        std::string out = quoted();
        expect('<'); expect('-');
        std::string in = quoted();
        Alias a{p.output_index(out), p.input_index(in)};
        if (a.output < 0) fail("alias names unknown output \"" + out + "\"");
        if (a.input < 0) fail("alias names unknown input \"" + in + "\"");
        p.aliases.push_back(a);
      } else if (peek('%')) {
        Eqn e;
        e.out = value();
        expect('=');
        std::string opn = word();
        try { e.op = parse_op(opn); } catch (const Error& err) { fail(err.what()); }
        expect('(');
        if (!accept(')')) {
          do e.inputs.push_back(value()); while (accept(','));
          expect(')');
        }
        if (accept('{')) {
          do {
            std::string k = word();
            expect('=');
            if (k == "literal") {
              expect('[');
              if (!accept(']')) {
                do e.attrs.literal.push_back(number()); while (accept(','));
                expect(']');
              }
            } else if (k == "axis") e.attrs.axis = integer();
            else if (k == "cmp") {
              std::string c = word();
              try { e.attrs.cmp = parse_cmp(c); } catch (const Error& err) { fail(err.what()); }
            } else if (k == "dims") e.attrs.dims = int_list();
            else if (k == "lhs_batch") e.attrs.lhs_batch = int_list();
            else if (k == "rhs_batch") e.attrs.rhs_batch = int_list();
            else if (k == "lhs_contract") e.attrs.lhs_contract = int_list();
            else if (k == "rhs_contract") e.attrs.rhs_contract = int_list();
            else if (k == "starts") e.attrs.starts = int_list();
            else if (k == "limits") e.attrs.limits = int_list();
            else if (k == "strides") e.attrs.strides = int_list();
            else if (k == "lows") e.attrs.lows = int_list();
            else if (k == "highs") e.attrs.highs = int_list();
            else if (k == "no_grad") e.attrs.no_grad = integer() != 0;
            else if (k == "region") {
              const int64_t r = integer();
              if (r < 0 || r > INT32_MAX) fail("region " + std::to_string(r) + " is not in [0, 2147483647]");
              e.attrs.region = static_cast<int32_t>(r);
            }
            else fail("unknown attribute \"" + k + "\"");
          } while (accept(','));
          expect('}');
        }
        expect(':');
        define(e.out, type());
        p.eqns.push_back(std::move(e));
      } else {
        fail("expected input, output, alias, an equation or '}'");
      }
    }
    skip();
    if (pos_ != s_.size()) fail("text after the end of the program");
    return p;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

Program parse_text(const std::string& text) {
  Program p = Reader(text).program();
  verify(p);
  return p;
}

}  // namespace capstep
