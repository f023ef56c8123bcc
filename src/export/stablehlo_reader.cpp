// from_stablehlo: reads back the subset of StableHLO text that to_stablehlo
// writes (also what JAX prints for the same ops) and rebuilds the Program.
//
// Two passes. The first reads every op into a list, checking each result type
// with the IR's own shape rules (check_type) as it goes, so an error points at
// the op. The second drops the constants that only feed reduce inits (they
// are part of reduce_sum / reduce_max in the IR) and builds the Program.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <map>
#include <unordered_map>

#include "capstep/stablehlo.h"
#include "export/mlir_cursor.h"
#include "export/stablehlo_common.h"
#include "export/stablehlo_literal.h"

namespace capstep {

using namespace stablehlo_detail;

namespace {

constexpr int64_t kMaxAxis = 64;
// Slice bounds and padding: any size a dimension may have (the shape rule
// checks them against the operand).
constexpr int64_t kMaxDim = std::numeric_limits<int64_t>::max();

struct Value {
  Type type;
  int op = -1;          // defining op in `ops`, -1 for an argument
};

struct ParsedOp {
  Op op = Op::constant;
  std::vector<int> operands;  // value indices
  Attrs attrs;
  Type type;
  int init = -1;              // reduce: the init value; pad: the padding value
  size_t pos = 0;
};

// A property of a generic op: <{key = value, ...}>.
struct Prop {
  enum class Kind { integer, list, boolean, dims, groups } kind = Kind::integer;
  int64_t i = 0;
  std::vector<int64_t> list;
  std::vector<std::vector<int64_t>> groups;  // dense<[[0, 1], ...]> : tensor<GxNxi64> (replica_groups)
  std::map<std::string, Prop> dims;  // #stablehlo.gather<...> / #stablehlo.scatter<...>
  size_t pos = 0;
};

class Reader {
 public:
  explicit Reader(const std::string& text) : c_(text) {}

  int num_replicas() const { return num_replicas_; }

  Program read() {
    skip_loc_aliases();
    c_.expect("module");
    if (c_.peek() == '@') c_.symbol();
    if (c_.accept("attributes")) module_attrs();
    c_.expect("{");
    function();
    c_.expect("}");
    c_.skip_loc();
    skip_loc_aliases();
    if (!c_.at_end()) c_.expected("end of input after the module");
    return build();
  }

 private:
  // "#loc3 = loc(...)" lines that JAX writes with debug info.
  void skip_loc_aliases() {
    while (c_.peek() == '#') {
      c_.expect("#");
      c_.ident();
      c_.expect("=");
      c_.skip_loc();
    }
  }

  void module_attrs() {
    c_.expect("{");
    if (c_.accept("}")) return;
    do {
      size_t at = c_.ws();
      std::string key = c_.ident();
      c_.expect("=");
      if (key == "mhlo.num_partitions" || key == "mhlo.num_replicas") {
        int64_t v = c_.integer(INT64_MIN / 2, INT64_MAX / 2, key.c_str());
        c_.expect(":");
        c_.expect("i32");
        if (key == "mhlo.num_replicas" && v >= 1 && v <= kMaxReplicas) {
          num_replicas_ = static_cast<int>(v);
        } else if (v != 1) {
          c_.fail(at, key + " = " + std::to_string(v) +
                          (key == "mhlo.num_replicas" ? ": the replica count must be in [1, " + std::to_string(kMaxReplicas) + "]"
                                                      : std::string(": only replicated modules (1 partition) are supported")));
        }
      } else if (key == "jax.uses_shape_polymorphism") {
        if (!c_.accept("false")) c_.expected("false (shape polymorphism is not supported)");
      } else {
        c_.fail(at, "unknown module attribute '" + key + "'");
      }
    } while (c_.accept(","));
    c_.expect("}");
  }

  int define(const std::string& name, size_t at, Value v) {
    if (names_.count(name)) c_.fail(at, "%" + name + " is defined twice");
    int id = static_cast<int>(values_.size());
    names_[name] = id;
    values_.push_back(std::move(v));
    return id;
  }

  int use() {
    size_t at = c_.ws();
    std::string n = c_.ssa_name();
    auto it = names_.find(n);
    if (it == names_.end()) c_.fail(at, "use of undefined value %" + n);
    return it->second;
  }

  void function() {
    c_.expect("func.func");
    if (!c_.accept("public")) c_.accept("private");
    size_t at = c_.ws();
    std::string fname = c_.symbol();
    if (fname != "main") c_.fail(at, "the function must be @main, found @" + fname);
    arguments();
    results();
    c_.expect("{");
    for (;;) {
      if (c_.accept("return") || c_.accept("func.return")) {
        ret();
        break;
      }
      op();
    }
    c_.expect("}");
    c_.skip_loc();
  }

  void arguments() {
    c_.expect("(");
    if (c_.accept(")")) return;
    do {
      size_t at = c_.ws();
      std::string n = c_.ssa_name();
      c_.expect(":");
      Type t = c_.tensor_type();
      int k = static_cast<int>(arg_names_.size());
      std::string name = "arg" + std::to_string(k);
      if (c_.peek() == '{') {
        c_.expect("{");
        do {
          size_t kat = c_.ws();
          std::string key = c_.ident();
          c_.expect("=");
          if (key == "tf.aliasing_output") {
            size_t vat = c_.ws();
            int64_t out = c_.integer(0, INT32_MAX, "tf.aliasing_output");
            c_.expect(":");
            c_.expect("i32");
            aliases_.push_back({static_cast<int>(out), k, vat});
          } else if (key == "mhlo.sharding" || key == "mhlo.layout_mode") {
            c_.string_lit();  // placement on one device: nothing to keep
          } else if (key == "jax.buffer_donor") {
            if (!c_.accept("true")) c_.expect("false");
          } else {
            c_.fail(kat, "unknown argument attribute '" + key + "'");
          }
        } while (c_.accept(","));
        c_.expect("}");
      }
      if (c_.accept("loc")) {
        c_.expect("(");
        if (c_.peek() == '"') {
          name = c_.string_lit();
          c_.expect(")");
        } else {
          c_.fail("an argument's loc(...) must be its name as a string, like loc(\"x\")");
        }
      }
      define(n, at, {t, -1});
      arg_names_.push_back(name);
      arg_pos_.push_back(at);
    } while (c_.accept(","));
    c_.expect(")");
  }

  void results() {
    if (!c_.accept("->")) return;
    bool paren = c_.accept("(");
    if (paren && c_.accept(")")) return;
    do {
      Type t = c_.tensor_type();
      std::string name = "out" + std::to_string(result_types_.size());
      if (paren && c_.peek() == '{') {
        c_.expect("{");
        do {
          size_t kat = c_.ws();
          std::string key = c_.ident();
          c_.expect("=");
          if (key == "jax.result_info") name = c_.string_lit();
          else if (key == "mhlo.sharding" || key == "mhlo.layout_mode") c_.string_lit();
          else c_.fail(kat, "unknown result attribute '" + key + "'");
        } while (c_.accept(","));
        c_.expect("}");
      }
      result_types_.push_back(t);
      result_names_.push_back(name);
    } while (paren && c_.accept(","));
    if (paren) c_.expect(")");
  }

  void ret() {
    ret_pos_ = c_.pos();
    if (c_.peek() == '%') {
      do {
        returned_.push_back(use());
      } while (c_.accept(","));
      c_.expect(":");
      for (size_t i = 0; i < returned_.size(); ++i) {
        if (i) c_.expect(",");
        size_t at = c_.ws();
        Type t = c_.tensor_type();
        if (t != values_[static_cast<size_t>(returned_[i])].type)
          c_.fail(at, "return type " + tensor_type(t) + " differs from the value's type " +
                          tensor_type(values_[static_cast<size_t>(returned_[i])].type));
      }
    }
    c_.skip_loc();
    if (returned_.size() != result_types_.size())
      c_.fail(ret_pos_, "return has " + std::to_string(returned_.size()) + " values, the function declares " +
                            std::to_string(result_types_.size()) + " results");
    for (size_t i = 0; i < returned_.size(); ++i)
      if (values_[static_cast<size_t>(returned_[i])].type != result_types_[i])
        c_.fail(ret_pos_, "result " + std::to_string(i) + " is declared " + tensor_type(result_types_[i]) +
                              " but the returned value is " + tensor_type(values_[static_cast<size_t>(returned_[i])].type));
  }

  // ---- one operation ---------------------------------------------------------
  void op() {
    size_t at = c_.ws();
    std::string result = c_.ssa_name();
    if (c_.peek() == ',') {  // several results: a variadic all_reduce (a pack)
      std::vector<std::string> results{result};
      while (c_.accept(",")) results.push_back(c_.ssa_name());
      c_.expect("=");
      const size_t op_at = c_.ws();
      if (c_.peek() != '"' || c_.string_lit() != "stablehlo.all_reduce")
        c_.fail(op_at, "only stablehlo.all_reduce may have several results" + std::string(kSubset));
      std::vector<ParsedOp> ps = all_reduce_pack(results.size(), op_at);
      c_.skip_loc();
      for (size_t k = 0; k < ps.size(); ++k) {
        check(ps[k]);
        define(results[k], at, {ps[k].type, static_cast<int>(ops_.size())});
        ops_.push_back(std::move(ps[k]));
      }
      return;
    }
    c_.expect("=");
    ParsedOp p;
    p.pos = c_.ws();
    if (c_.peek() == '"') {
      std::string name = c_.string_lit();
      if (name == "stablehlo.gather") gather(p);
      else if (name == "stablehlo.scatter") scatter(p);
      else if (name == "stablehlo.all_reduce") all_reduce(p);
      else c_.fail(p.pos, "unsupported operation \"" + name + "\"" + kSubset);
    } else {
      std::string name = c_.ident();
      pretty(name, p);
    }
    c_.skip_loc();
    check(p);
    int id = define(result, at, {p.type, static_cast<int>(ops_.size())});
    (void)id;
    ops_.push_back(std::move(p));
  }

  static constexpr const char* kSubset =
      " (the reader knows the ops to_stablehlo writes; see docs/stablehlo.md)";

  // Operand types as the op spells them: "(A, B) -> R" or "A, B" forms.
  void check_operand_type(int v, const Type& declared, size_t at) {
    const Type& t = values_[static_cast<size_t>(v)].type;
    if (t != declared)
      c_.fail(at, "operand type " + tensor_type(declared) + " differs from the value's type " + tensor_type(t));
  }
  // ": (A, B) -> R" for the given operands; returns R.
  Type fn_type(const std::vector<int>& operands) {
    c_.expect(":");
    c_.expect("(");
    for (size_t i = 0; i < operands.size(); ++i) {
      if (i) c_.expect(",");
      size_t at = c_.ws();
      check_operand_type(operands[i], c_.tensor_type(), at);
    }
    c_.expect(")");
    c_.expect("->");
    return c_.tensor_type();
  }
  // ": T" (all operands and the result have type T) or the function form.
  Type same_type(const std::vector<int>& operands) {
    size_t at = c_.ws();
    c_.expect(":");
    if (c_.peek() == '(') {
      c_.fail(at, "expected ': tensor<...>' (operands and result of one type)");
    }
    size_t tat = c_.ws();
    Type t = c_.tensor_type();
    for (int v : operands) check_operand_type(v, t, tat);
    return t;
  }
  std::vector<int> operand_list(size_t n) {
    std::vector<int> v;
    for (size_t i = 0; i < n; ++i) {
      if (i) c_.expect(",");
      v.push_back(use());
    }
    return v;
  }

  void pretty(const std::string& name, ParsedOp& p) {
    // the unary and binary primitives, by their StableHLO op (the table's column)
    static const std::map<std::string, Op> simple = [] {
      std::map<std::string, Op> m;
#define CAPSTEP_X(name, ...) m.emplace(op_stablehlo_name(Op::name), Op::name);
      CAPSTEP_BINARY_OPS(CAPSTEP_X)
      CAPSTEP_UNARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
      return m;
    }();
    if (auto it = simple.find(name); it != simple.end()) {
      p.op = it->second;
      p.operands = operand_list(static_cast<size_t>(op_arity(p.op)));
      p.type = same_type(p.operands);
    } else if (name == "stablehlo.constant") {
      p.op = Op::constant;
      DenseLiteral d = read_dense(c_);
      c_.expect(":");
      p.type = c_.tensor_type();
      p.attrs.literal = literal_values(c_, d, p.type);
    } else if (name == "stablehlo.iota") {
      p.op = Op::iota;
      c_.expect("dim");
      c_.expect("=");
      p.attrs.axis = c_.integer(0, kMaxAxis, "iota dim");
      c_.expect(":");
      p.type = c_.tensor_type();
    } else if (name == "stablehlo.compare") {
      p.op = Op::compare;
      size_t at = c_.ws();
      std::string dir = c_.ident();
      try {
        p.attrs.cmp = parse_cmp(dir);
      } catch (const Error& e) {
        c_.fail(at, e.what());
      }
      c_.expect(",");
      p.operands = operand_list(2);
      size_t tat = 0;
      std::string ctype;
      if (c_.accept(",")) {
        tat = c_.ws();
        ctype = c_.ident();
      }
      p.type = fn_type(p.operands);
      if (!ctype.empty()) {
        const char* want = compare_type(values_[static_cast<size_t>(p.operands[0])].type.dtype);
        if (ctype != want) c_.fail(tat, "comparison type " + ctype + " does not fit the operands (expected " + want + ")");
      }
    } else if (name == "stablehlo.select") {
      p.op = Op::select;
      p.operands = operand_list(3);
      c_.expect(":");
      size_t at = c_.ws();
      Type pred = c_.tensor_type();
      check_operand_type(p.operands[0], pred, at);
      c_.expect(",");
      at = c_.ws();
      p.type = c_.tensor_type();
      check_operand_type(p.operands[1], p.type, at);
      check_operand_type(p.operands[2], p.type, at);
    } else if (name == "stablehlo.convert" || name == "stablehlo.reshape") {
      p.op = name == "stablehlo.convert" ? Op::convert : Op::reshape;
      p.operands = operand_list(1);
      p.type = fn_type(p.operands);
    } else if (name == "stablehlo.broadcast_in_dim" || name == "stablehlo.transpose") {
      p.op = name == "stablehlo.transpose" ? Op::transpose : Op::broadcast_in_dim;
      p.operands = operand_list(1);
      c_.expect(",");
      c_.expect("dims");
      c_.expect("=");
      p.attrs.dims = c_.int_list(0, kMaxAxis, "dimension");
      p.type = fn_type(p.operands);
    } else if (name == "stablehlo.dot_general") {
      p.op = Op::dot_general;
      p.operands = operand_list(2);
      bool contracting = false;
      while (c_.accept(",")) {
        size_t at = c_.ws();
        std::string key = c_.ident();
        c_.expect("=");
        if (key == "batching_dims") {
          p.attrs.lhs_batch = c_.int_list(0, kMaxAxis, "dimension");
          c_.expect("x");
          p.attrs.rhs_batch = c_.int_list(0, kMaxAxis, "dimension");
        } else if (key == "contracting_dims") {
          p.attrs.lhs_contract = c_.int_list(0, kMaxAxis, "dimension");
          c_.expect("x");
          p.attrs.rhs_contract = c_.int_list(0, kMaxAxis, "dimension");
          contracting = true;
        } else if (key == "precision") {
          c_.expect("[");
          do {
            size_t pat = c_.ws();
            std::string pr = c_.ident();
            if (pr != "DEFAULT" && pr != "HIGH" && pr != "HIGHEST") c_.fail(pat, "unknown precision '" + pr + "'");
          } while (c_.accept(","));
          c_.expect("]");
        } else {
          c_.fail(at, "unsupported dot_general attribute '" + key + "'");
        }
      }
      if (!contracting) c_.expected("contracting_dims = [...] x [...]");
      p.type = fn_type(p.operands);
    } else if (name == "stablehlo.reduce") {
      reduce(p);
    } else if (name == "stablehlo.slice") {
      // %r = stablehlo.slice %x [start:limit(:stride)?, ...] : (T) -> R
      p.op = Op::slice;
      p.operands = operand_list(1);
      c_.expect("[");
      if (!c_.accept("]")) {
        do {
          p.attrs.starts.push_back(c_.integer(0, kMaxDim, "slice start"));
          c_.expect(":");
          p.attrs.limits.push_back(c_.integer(0, kMaxDim, "slice limit"));
          p.attrs.strides.push_back(c_.accept(":") ? c_.integer(1, kMaxDim, "slice stride") : 1);
        } while (c_.accept(","));
        c_.expect("]");
      }
      p.type = fn_type(p.operands);
    } else if (name == "stablehlo.pad") {
      pad(p);
    } else if (name == "stablehlo.concatenate") {
      // %r = stablehlo.concatenate %a, %b, ..., dim = N : (A, B, ...) -> R
      p.op = Op::concatenate;
      p.operands = {use()};
      while (c_.accept(",")) {
        if (c_.accept("dim")) {
          c_.expect("=");
          p.attrs.axis = c_.integer(0, kMaxAxis, "concatenate dim");
          p.type = fn_type(p.operands);
          return;
        }
        p.operands.push_back(use());
      }
      c_.expected("', dim = N'");
    } else {
      c_.fail(p.pos, "unsupported operation '" + name + "'" + kSubset);
    }
  }

  void reduce(ParsedOp& p) {
    c_.expect("(");
    p.operands = {use()};
    c_.expect("init");
    c_.expect(":");
    size_t init_at = c_.ws();
    p.init = use();
    c_.expect(")");
    c_.expect("applies");
    size_t body_at = c_.ws();
    std::string body = c_.ident();
    if (body == "stablehlo.add") p.op = Op::reduce_sum;
    else if (body == "stablehlo.maximum") p.op = Op::reduce_max;
    else c_.fail(body_at, "a reduce must apply stablehlo.add or stablehlo.maximum, found '" + body + "'");
    c_.expect("across");
    c_.expect("dimensions");
    c_.expect("=");
    p.attrs.dims = c_.int_list(0, kMaxAxis, "dimension");
    p.type = fn_type({p.operands[0], p.init});
    // The init must be the identity, given by a constant: the IR has no other.
    const Value& iv = values_[static_cast<size_t>(p.init)];
    DType dt = values_[static_cast<size_t>(p.operands[0])].type.dtype;
    if (iv.type != Type{dt, {}})
      c_.fail(init_at, "reduce init must be a scalar " + std::string(dtype_name(dt)) + ", found " + tensor_type(iv.type));
    double want = reduce_init(p.op, dt);
    bool ok = iv.op >= 0 && ops_[static_cast<size_t>(iv.op)].op == Op::constant &&
              ops_[static_cast<size_t>(iv.op)].attrs.literal.size() == 1 &&
              ops_[static_cast<size_t>(iv.op)].attrs.literal[0] == want;
    if (!ok)
      c_.fail(init_at, std::string("reduce init must be a constant ") + element_text(dt, want) + " (the identity of " +
                           body + ")");
  }

  // %r = stablehlo.pad %x, %zero, low = [...], high = [...], interior = [0, ...] : (T, S) -> R
  // The padding value must be a constant 0 and the interior padding 0: the
  // IR's pad has neither.
  void pad(ParsedOp& p) {
    p.op = Op::pad;
    p.operands = {use()};
    c_.expect(",");
    size_t value_at = c_.ws();
    p.init = use();
    for (const char* key : {"low", "high", "interior"}) {
      c_.expect(",");
      c_.expect(key);
      c_.expect("=");
      size_t at = c_.ws();
      std::vector<int64_t> v = c_.int_list(0, kMaxDim, "padding");
      if (key[0] == 'l') p.attrs.lows = std::move(v);
      else if (key[0] == 'h') p.attrs.highs = std::move(v);
      else {
        for (int64_t x : v)
          if (x != 0) c_.fail(at, "interior padding must be 0 (capstep's pad has none)");
      }
    }
    p.type = fn_type({p.operands[0], p.init});
    const Value& iv = values_[static_cast<size_t>(p.init)];
    DType dt = values_[static_cast<size_t>(p.operands[0])].type.dtype;
    bool ok = iv.type == Type{dt, {}} && iv.op >= 0 && ops_[static_cast<size_t>(iv.op)].op == Op::constant &&
              ops_[static_cast<size_t>(iv.op)].attrs.literal.size() == 1 &&
              std::bit_cast<uint64_t>(ops_[static_cast<size_t>(iv.op)].attrs.literal[0]) == std::bit_cast<uint64_t>(0.0);
    if (!ok)
      c_.fail(value_at, "the padding value must be a scalar " + std::string(dtype_name(dt)) +
                            " constant 0 (capstep pads with zeros)");
  }

  // <{key = value, ...}>
  std::map<std::string, Prop> props() {
    std::map<std::string, Prop> m;
    c_.expect("<{");
    if (c_.accept("}>")) return m;
    do {
      size_t at = c_.ws();
      std::string key = c_.ident();
      c_.expect("=");
      Prop pr;
      pr.pos = c_.ws();
      if (c_.accept("true") || c_.accept("false")) {
        pr.kind = Prop::Kind::boolean;
      } else if (c_.accept("array")) {
        c_.expect("<");
        c_.expect("i64");
        pr.kind = Prop::Kind::list;
        if (c_.accept(":")) {
          do {
            if (pr.list.size() >= 64) c_.fail("too many entries in array<i64: ...>");
            pr.list.push_back(c_.integer(0, int64_t{1} << 40, "array entry"));
          } while (c_.accept(","));
        }
        c_.expect(">");
      } else if (c_.peek() == '#') {
        c_.expect("#");
        std::string kind = c_.ident();
        if (kind != "stablehlo.gather" && kind != "stablehlo.scatter")
          c_.fail(pr.pos, "unsupported attribute #" + kind);
        pr.kind = Prop::Kind::dims;
        c_.expect("<");
        do {
          size_t fat = c_.ws();
          std::string f = c_.ident();
          c_.expect("=");
          Prop v;
          v.pos = c_.ws();
          if (c_.peek() == '[') {
            v.kind = Prop::Kind::list;
            v.list = c_.int_list(0, kMaxAxis, "dimension");
          } else {
            v.kind = Prop::Kind::integer;
            v.i = c_.integer(0, kMaxAxis, f.c_str());
          }
          if (pr.dims.count(f)) c_.fail(fat, "'" + f + "' given twice");
          pr.dims[f] = v;
        } while (c_.accept(","));
        c_.expect(">");
      } else if (c_.accept("dense")) {
        // replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>
        pr.kind = Prop::Kind::groups;
        c_.expect("<");
        c_.expect("[");
        do {
          if (pr.groups.size() >= static_cast<size_t>(kMaxReplicas)) c_.fail("too many replica groups");
          pr.groups.push_back(c_.int_list(0, kMaxReplicas - 1, "replica id"));
        } while (c_.accept(","));
        c_.expect("]");
        c_.expect(">");
        c_.expect(":");
        // Every group the same size (a rectangular tensor), its type spelled out.
        for (const std::vector<int64_t>& g : pr.groups)
          if (g.size() != pr.groups[0].size()) c_.fail(pr.pos, "replica groups of different sizes");
        const std::string t = "tensor<" + std::to_string(pr.groups.size()) + "x" + std::to_string(pr.groups[0].size()) + "xi64>";
        c_.expect(t.c_str());
      } else {
        c_.expected("true, false, array<i64: ...>, dense<...> or #stablehlo...");
      }
      if (m.count(key)) c_.fail(at, "'" + key + "' given twice");
      m[key] = pr;
    } while (c_.accept(","));
    c_.expect("}>");
    return m;
  }

  // The only gather / scatter the IR has is over rows (axis 0), with an
  // implicit trailing index dimension. Anything else is reported precisely.
  void expect_dims(const std::map<std::string, Prop>& m, const char* key, const std::string& field,
                   const Prop& want, size_t at) {
    auto it = m.find(key);
    if (it == m.end()) c_.fail(at, std::string("missing ") + key);
    const auto& d = it->second.dims;
    auto f = d.find(field);
    bool ok;
    if (want.kind == Prop::Kind::integer) ok = f != d.end() && f->second.kind == Prop::Kind::integer && f->second.i == want.i;
    else ok = (f == d.end() && want.list.empty()) || (f != d.end() && f->second.kind == Prop::Kind::list && f->second.list == want.list);
    if (!ok) {
      std::string w = want.kind == Prop::Kind::integer ? std::to_string(want.i) : shape_str(want.list);
      c_.fail(f == d.end() ? it->second.pos : f->second.pos,
              "only gathers/scatters of rows are supported: expected " + field + " = " + w);
    }
  }
  void check_fields(const std::map<std::string, Prop>& m, const char* key, std::initializer_list<const char*> known) {
    auto it = m.find(key);
    if (it == m.end()) return;
    for (const auto& [f, v] : it->second.dims) {
      bool k = false;
      for (const char* n : known) k = k || f == n;
      if (!k) c_.fail(v.pos, "unsupported field '" + f + "' in " + key);
    }
  }
  void expect_bool_props(const std::map<std::string, Prop>& m, std::initializer_list<const char*> allowed,
                         std::initializer_list<const char*> other, size_t at) {
    for (const auto& [k, v] : m) {
      bool ok = false;
      for (const char* a : allowed) ok = ok || (k == a && v.kind == Prop::Kind::boolean);
      for (const char* a : other) ok = ok || k == a;
      if (!ok) c_.fail(v.pos, "unsupported property '" + k + "'");
    }
    (void)at;
  }
  static Prop ilist(int64_t from, int64_t n) {
    Prop p;
    p.kind = Prop::Kind::list;
    for (int64_t i = 0; i < n; ++i) p.list.push_back(from + i);
    return p;
  }
  static Prop ival(int64_t v) {
    Prop p;
    p.i = v;
    return p;
  }

  void gather(ParsedOp& p) {
    p.op = Op::gather_rows;
    c_.expect("(");
    p.operands = operand_list(2);
    c_.expect(")");
    size_t at = c_.ws();
    auto m = props();
    p.type = fn_type(p.operands);
    const Type& table = values_[static_cast<size_t>(p.operands[0])].type;
    const Type& idx = values_[static_cast<size_t>(p.operands[1])].type;
    if (table.rank() < 1) c_.fail(at, "gather of rows needs a table of rank >= 1");
    expect_bool_props(m, {"indices_are_sorted"}, {"dimension_numbers", "slice_sizes"}, at);
    check_fields(m, "dimension_numbers", {"offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim"});
    int64_t s = idx.rank(), d = table.rank() - 1;
    expect_dims(m, "dimension_numbers", "offset_dims", ilist(s, d), at);
    expect_dims(m, "dimension_numbers", "collapsed_slice_dims", ilist(0, 1), at);
    expect_dims(m, "dimension_numbers", "start_index_map", ilist(0, 1), at);
    expect_dims(m, "dimension_numbers", "index_vector_dim", ival(s), at);
    auto sz = m.find("slice_sizes");
    std::vector<int64_t> want{1};
    want.insert(want.end(), table.shape.begin() + 1, table.shape.end());
    if (sz == m.end() || sz->second.kind != Prop::Kind::list || sz->second.list != want)
      c_.fail(sz == m.end() ? at : sz->second.pos, "slice_sizes must be array<i64: " + [&] {
        std::string w;
        for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
        return w;
      }() + "> (one row of the table)");
  }

  // The reducer region of scatter and all_reduce, which must add:
  //   ({ ^bb0(%a: T, %b: T): %r = stablehlo.add %a, %b : T  stablehlo.return %r : T })
  void add_region(DType dtype, const char* op) {
    c_.expect("(");
    c_.expect("{");
    c_.expect("^bb0");
    c_.expect("(");
    std::string a = c_.ssa_name();
    c_.expect(":");
    Type ta = c_.tensor_type();
    c_.expect(",");
    std::string b = c_.ssa_name();
    c_.expect(":");
    Type tb = c_.tensor_type();
    c_.expect(")");
    c_.expect(":");
    size_t body_at = c_.ws();
    std::string r = c_.ssa_name();
    c_.expect("=");
    std::string fn = c_.ident();
    std::string x = c_.ssa_name();
    c_.expect(",");
    std::string y = c_.ssa_name();
    c_.expect(":");
    Type tr = c_.tensor_type();
    c_.skip_loc();
    c_.expect("stablehlo.return");
    std::string rr = c_.ssa_name();
    c_.expect(":");
    c_.tensor_type();
    c_.skip_loc();
    c_.expect("}");
    c_.expect(")");
    Type scalar{dtype, {}};
    bool body_ok = fn == "stablehlo.add" && a != b && ((x == a && y == b) || (x == b && y == a)) && rr == r &&
                   ta == scalar && tb == scalar && tr == scalar;
    if (!body_ok)
      c_.fail(body_at, std::string("the ") + op + " body must add its two " + tensor_type(scalar) +
                           " arguments and return the sum");
  }

  // "<{replica_groups = dense<[[0, ..., N-1]]>}>": the one group capstep writes.
  void replica_groups() {
    size_t at = c_.ws();
    auto m = props();
    for (const auto& [key, pr] : m)
      if (key != "replica_groups") c_.fail(pr.pos, "unsupported all_reduce property '" + key + "' (capstep writes replica_groups only)");
    auto g = m.find("replica_groups");
    if (g == m.end() || g->second.kind != Prop::Kind::groups) c_.fail(at, "all_reduce needs replica_groups = dense<[[...]]>");
    std::vector<int64_t> all;
    for (int r = 0; r < num_replicas_; ++r) all.push_back(r);
    if (g->second.groups.size() != 1 || g->second.groups[0] != all)
      c_.fail(g->second.pos, "replica_groups must be one group of every replica, [[0, ..., " +
                                 std::to_string(num_replicas_ - 1) + "]] for mhlo.num_replicas = " +
                                 std::to_string(num_replicas_));
  }

  // Cross-replica sum: one group holding every replica of the module, in order.
  void all_reduce(ParsedOp& p) {
    p.op = Op::all_reduce;
    c_.expect("(");
    p.operands = operand_list(1);
    c_.expect(")");
    replica_groups();
    add_region(values_[static_cast<size_t>(p.operands[0])].type.dtype, "all_reduce");
    p.type = fn_type(p.operands);
  }

  // "(%x, %y) <{replica_groups}> ({reducer}) : (A, B) -> (A, B)": n
  // all_reduce equations of one dtype (the writer's packs).
  std::vector<ParsedOp> all_reduce_pack(size_t n, size_t at) {
    c_.expect("(");
    std::vector<int> operands = operand_list(n);
    c_.expect(")");
    replica_groups();
    const DType dt = values_[static_cast<size_t>(operands[0])].type.dtype;
    for (int v : operands)
      if (values_[static_cast<size_t>(v)].type.dtype != dt)
        c_.fail(at, "the operands of one stablehlo.all_reduce must share a dtype (capstep packs one dtype)");
    add_region(dt, "all_reduce");
    c_.expect(":");
    c_.expect("(");
    for (size_t i = 0; i < n; ++i) {
      if (i) c_.expect(",");
      size_t tat = c_.ws();
      check_operand_type(operands[i], c_.tensor_type(), tat);
    }
    c_.expect(")");
    c_.expect("->");
    c_.expect("(");
    std::vector<ParsedOp> ps(n);
    for (size_t i = 0; i < n; ++i) {
      if (i) c_.expect(",");
      ps[i].op = Op::all_reduce;
      ps[i].operands = {operands[i]};
      ps[i].pos = at;
      ps[i].type = c_.tensor_type();
    }
    c_.expect(")");
    return ps;
  }

  void scatter(ParsedOp& p) {
    p.op = Op::scatter_add_rows;
    c_.expect("(");
    p.operands = operand_list(3);
    c_.expect(")");
    size_t at = c_.ws();
    auto m = props();
    const Type& operand = values_[static_cast<size_t>(p.operands[0])].type;
    const Type& idx = values_[static_cast<size_t>(p.operands[1])].type;
    add_region(operand.dtype, "scatter");
    p.type = fn_type(p.operands);
    if (operand.rank() < 1) c_.fail(at, "scatter of rows needs an operand of rank >= 1");
    expect_bool_props(m, {"indices_are_sorted", "unique_indices"}, {"scatter_dimension_numbers"}, at);
    check_fields(m, "scatter_dimension_numbers",
                 {"update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "index_vector_dim"});
    int64_t s = idx.rank(), d = operand.rank() - 1;
    expect_dims(m, "scatter_dimension_numbers", "update_window_dims", ilist(s, d), at);
    expect_dims(m, "scatter_dimension_numbers", "inserted_window_dims", ilist(0, 1), at);
    expect_dims(m, "scatter_dimension_numbers", "scatter_dims_to_operand_dims", ilist(0, 1), at);
    expect_dims(m, "scatter_dimension_numbers", "index_vector_dim", ival(s), at);
  }

  // The IR's own shape rule decides whether the op and its result type agree.
  void check(const ParsedOp& p) {
    std::vector<Type> ts;
    for (int v : p.operands) ts.push_back(values_[static_cast<size_t>(v)].type);
    try {
      check_type(p.op, ts, p.attrs, p.type);
    } catch (const Error& e) {
      c_.fail(p.pos, e.what());
    }
  }

  // ---- second pass -------------------------------------------------------------
  Program build() {
    // A constant only used as a reduce init belongs to that reduce.
    std::vector<int> other_uses(values_.size(), 0), init_uses(values_.size(), 0);
    for (const ParsedOp& p : ops_) {
      for (int v : p.operands) ++other_uses[static_cast<size_t>(v)];
      if (p.init >= 0) ++init_uses[static_cast<size_t>(p.init)];
    }
    for (int v : returned_) ++other_uses[static_cast<size_t>(v)];

    Program prog;
    std::vector<int> id(values_.size(), -1);
    size_t next = 0;
    auto wrap = [&](size_t at, auto&& f) {
      try {
        f();
      } catch (const Error& e) {
        c_.fail(at, e.what());
      }
    };
    for (size_t i = 0; i < arg_names_.size(); ++i)
      wrap(arg_pos_[i], [&] { id[next] = prog.add_input(arg_names_[i], values_[next].type); ++next; });
    for (const ParsedOp& p : ops_) {
      size_t v = next++;
      if (p.op == Op::constant && init_uses[v] > 0 && other_uses[v] == 0) continue;
      std::vector<int> ins;
      for (int o : p.operands) ins.push_back(id[static_cast<size_t>(o)]);
      wrap(p.pos, [&] { id[v] = prog.add_eqn_typed(p.op, ins, p.attrs, p.type); });
    }
    for (size_t i = 0; i < returned_.size(); ++i)
      wrap(ret_pos_, [&] { prog.add_output(result_names_[i], id[static_cast<size_t>(returned_[i])]); });
    std::sort(aliases_.begin(), aliases_.end(), [](const PendingAlias& a, const PendingAlias& b) { return a.input < b.input; });
    for (const PendingAlias& a : aliases_) {
      if (a.output >= static_cast<int>(prog.outputs.size()))
        c_.fail(a.pos, "tf.aliasing_output = " + std::to_string(a.output) + " but the function has " +
                           std::to_string(prog.outputs.size()) + " results");
      prog.aliases.push_back({a.output, a.input});
    }
    wrap(aliases_.empty() ? ret_pos_ : aliases_.front().pos, [&] { verify(prog); });
    return prog;
  }

  struct PendingAlias {
    int output;
    int input;
    size_t pos;
  };

  Cursor c_;
  int num_replicas_ = 1;   // mhlo.num_replicas
  std::unordered_map<std::string, int> names_;
  std::vector<Value> values_;
  std::vector<ParsedOp> ops_;
  std::vector<std::string> arg_names_;
  std::vector<size_t> arg_pos_;
  std::vector<PendingAlias> aliases_;
  std::vector<Type> result_types_;
  std::vector<std::string> result_names_;
  std::vector<int> returned_;
  size_t ret_pos_ = 0;
};

}  // namespace

Program from_stablehlo(const std::string& text, int* num_replicas) {
  Reader r(text);
  Program p = r.read();
  if (num_replicas) *num_replicas = r.num_replicas();
  return p;
}

}  // namespace capstep
