// loop_kernel_source: the text of one fused kernel (see kernel_source.h).
#include "backend/plan/kernel_source.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "backend/plan/walk.h"

namespace capstep::plan {
namespace {

// C++ type of a value in registers; i1 is a bool there and a byte in memory.
const char* reg_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::i32: return "int";
    case DType::i1: return "bool";
  }
  return "?";
}
const char* mem_type(DType t) { return t == DType::i1 ? "unsigned char" : reg_type(t); }

std::string literal(DType t, double v) {
  char buf[64];
  switch (t) {
    case DType::f32: {
      const float f = static_cast<float>(v);
      if (std::isfinite(f)) {
        std::snprintf(buf, sizeof buf, "%af", static_cast<double>(f));
      } else {
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        std::snprintf(buf, sizeof buf, "__int_as_float(0x%08" PRIx32 ")", bits);
      }
      return buf;
    }
    case DType::f64: {
      if (std::isfinite(v)) {
        std::snprintf(buf, sizeof buf, "%a", v);
      } else {
        uint64_t bits;
        std::memcpy(&bits, &v, 8);
        std::snprintf(buf, sizeof buf, "__longlong_as_double(0x%016" PRIx64 "LL)", bits);
      }
      return buf;
    }
    case DType::i32: {
      const int64_t i = static_cast<int64_t>(v);
      if (i == INT32_MIN) return "(-2147483647 - 1)";
      return std::to_string(i);
    }
    case DType::i1: return v != 0 ? "true" : "false";
  }
  return "?";
}

const char* scalar_fn(Op op) {
  switch (op) {
    case Op::add: return "add";
    case Op::subtract: return "subtract";
    case Op::multiply: return "multiply";
    case Op::divide: return "divide";
    case Op::maximum: return "maximum";
    case Op::negate: return "negate";
    case Op::exponential: return "exponential";
    case Op::log: return "log";
    case Op::tanh: return "tanh";
    case Op::rsqrt: return "rsqrt";
    case Op::sqrt: return "sqrt";
    default: return nullptr;
  }
}

// The offset expression of a broadcast's operand for element i: walk_offset
// (walk.h) unrolled with the walk's constants.
std::string offset_code(const Walk& w) {
  int lowest = -1;  // the outermost axis with a non-zero stride
  for (int d = 0; d < w.rank; ++d)
    if (w.stride[d] != 0) { lowest = d; break; }
  if (lowest < 0) return "0";
  std::ostringstream s;
  std::string t = "i";
  bool first = true;
  for (int d = w.rank - 1; d >= lowest; --d) {
    const std::string div = "(" + t + " / " + std::to_string(w.dims[d]) + "LL)";
    if (w.stride[d] != 0) {
      const std::string c = d == 0 ? t : "(" + t + " % " + std::to_string(w.dims[d]) + "LL)";
      s << (first ? "" : " + ") << c << (w.stride[d] == 1 ? "" : " * " + std::to_string(w.stride[d]) + "LL");
      first = false;
    }
    t = div;
  }
  return s.str();
}

}  // namespace

KernelSource loop_kernel_source(const Fused& f, int index) {
  const Program& p = f.program;
  const Group& g = f.groups.at(static_cast<size_t>(index));
  if (g.kind != GroupKind::loop)
    throw Error("loop_kernel_source: group " + std::to_string(index) + " is a " + group_kind_name(g.kind) +
                " group, not a loop");
  std::vector<int> producer(static_cast<size_t>(p.num_values()), -1);
  for (int d = 0; d < static_cast<int>(p.eqns.size()); ++d) producer[static_cast<size_t>(p.eqns[static_cast<size_t>(d)].out)] = d;
  // A splat constant (one literal, or one element) is inlined.
  auto splat = [&](int x, double* v) {
    const int q = producer[static_cast<size_t>(x)];
    if (q < 0) return false;
    const Eqn& e = p.eqns[static_cast<size_t>(q)];
    if (e.op != Op::constant || e.attrs.literal.empty()) return false;
    if (e.attrs.literal.size() != 1 && p.type(x).numel() != 1) return false;
    *v = e.attrs.literal[0];
    return true;
  };
  KernelSource k;
  k.name = "capstep_loop_" + std::to_string(index);
  k.numel = g.numel;
  std::map<int, std::string> param_name;  // value -> "inK" / "outK"
  for (int x : g.inputs) {
    double v;
    if (splat(x, &v)) continue;
    param_name[x] = "in" + std::to_string(k.params.size());
    k.params.push_back(x);
  }
  k.n_inputs = static_cast<int>(k.params.size());
  std::map<int, std::string> out_name;
  for (int x : g.outputs) {
    out_name[x] = "out" + std::to_string(k.params.size() - static_cast<size_t>(k.n_inputs));
    k.params.push_back(x);
  }

  std::ostringstream body;
  std::set<int> member, loaded;
  for (int d = g.first; d <= g.last; ++d) member.insert(p.eqns[static_cast<size_t>(d)].out);
  // an operand at element i: a member's register, a literal, or a load
  auto operand = [&](int x) -> std::string {
    if (member.count(x)) return "v" + std::to_string(x);
    double v;
    if (splat(x, &v)) return literal(p.type(x).dtype, v);
    if (!loaded.count(x)) {
      loaded.insert(x);
      const DType t = p.type(x).dtype;
      body << "    const " << reg_type(t) << " x" << x << " = " << param_name.at(x) << "[i]"
           << (t == DType::i1 ? " != 0" : "") << ";\n";
    }
    return "x" + std::to_string(x);
  };
  for (int d = g.first; d <= g.last; ++d) {
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    const DType ot = p.type(e.out).dtype;
    const std::string T = reg_type(ot);
    std::string expr;
    if (const char* fn = scalar_fn(e.op)) {
      expr = std::string("capstep::scalar::") + fn + "<" + T + ">(" + operand(e.inputs[0]);
      for (size_t a = 1; a < e.inputs.size(); ++a) expr += ", " + operand(e.inputs[a]);
      expr += ")";
    } else {
      switch (e.op) {
        case Op::compare: {
          const std::string a = operand(e.inputs[0]), b = operand(e.inputs[1]);
          expr = std::string("capstep::scalar::compare<") + reg_type(p.type(e.inputs[0]).dtype) + ">(" +
                 std::to_string(static_cast<int>(e.attrs.cmp)) + ", " + a + ", " + b + ")";
          break;
        }
        case Op::select: {
          const std::string c = operand(e.inputs[0]), a = operand(e.inputs[1]), b = operand(e.inputs[2]);
          expr = "(" + c + " ? " + a + " : " + b + ")";
          break;
        }
        case Op::convert: {
          const DType from = p.type(e.inputs[0]).dtype;
          const std::string a = operand(e.inputs[0]);
          if (from == ot) expr = a;
          else if (from == DType::i1) expr = ot == DType::i1 ? a : "static_cast<" + T + ">(" + a + " ? 1 : 0)";
          else expr = "capstep::scalar::convert<" + T + ", " + reg_type(from) + ">(" + a + ")";
          break;
        }
        case Op::broadcast_in_dim: {
          const int x = e.inputs[0];
          const Type& it = p.type(x);
          double v;
          if (member.count(x) || splat(x, &v) || it.numel() == g.numel) {
            expr = operand(x);  // the same flat index (only axes of size 1 are added)
          } else {
            const Walk w = broadcast_walk(it.shape, p.type(e.out).shape, e.attrs.dims,
                                          "broadcast_in_dim in " + k.name);
            expr = param_name.at(x) + "[" + offset_code(w) + "]" + (it.dtype == DType::i1 ? " != 0" : "");
          }
          break;
        }
        default:
          throw Error("loop_kernel_source: " + std::string(op_name(e.op)) + " cannot be in a loop group");
      }
    }
    body << "    const " << T << " v" << e.out << " = " << expr << ";\n";
  }
  for (int x : g.outputs)
    body << "    " << out_name.at(x) << "[i] = v" << x << (p.type(x).dtype == DType::i1 ? " ? 1 : 0" : "") << ";\n";

  std::ostringstream s;
  s << "extern \"C\" __global__ void __launch_bounds__(" << kLoopThreads << ") " << k.name << "(";
  for (size_t a = 0; a < k.params.size(); ++a) {
    const bool in = static_cast<int>(a) < k.n_inputs;
    const int x = k.params[a];
    s << (in ? "const " : "") << mem_type(p.type(x).dtype) << "* " << (in ? param_name.at(x) : out_name.at(x))
      << ", ";
  }
  s << "long long n) {\n"
    << "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    << "       i += (long long)blockDim.x * gridDim.x) {\n"
    << body.str() << "  }\n}\n";
  k.code = s.str();
  return k;
}

std::vector<KernelSource> loop_kernel_sources(const Fused& f) {
  std::vector<KernelSource> ks;
  for (int g = 0; g < static_cast<int>(f.groups.size()); ++g)
    if (f.groups[static_cast<size_t>(g)].kind == GroupKind::loop && !f.groups[static_cast<size_t>(g)].outputs.empty())
      ks.push_back(loop_kernel_source(f, g));
  return ks;
}

std::string kernel_module_source(const std::vector<KernelSource>& ks) {
  std::string s =
      "// capstep: fused loop kernels, generated when the Program was compiled\n"
      "#include \"ir/scalar_math.h\"\n\n";
  for (const KernelSource& k : ks) s += k.code + "\n";
  return s;
}

std::vector<std::string> nvrtc_options(const std::string& arch) {
  // --split-compile=0: NVRTC's optimizer on every core (the seed's AdamW
  // program is 80 kernels, seconds on one core)
  return {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=false", "--prec-div=true", "--prec-sqrt=true",
          "--ftz=false", "--split-compile=0"};
}

}  // namespace capstep::plan
