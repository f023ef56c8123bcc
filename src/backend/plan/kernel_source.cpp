// loop_kernel_source and the other fused kernels' text (see kernel_source.h);
// the gemm kernels are in kernel_source_gemm.cpp, the shared pieces in
// kernel_emitter.h.
#include "backend/plan/kernel_source.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "backend/plan/kernel_emitter.h"
#include "backend/plan/walk.h"

namespace capstep::plan {

using namespace emit;

KernelSource loop_kernel_source(const Fused& f, int index) {
  const Group& g = group_of_kind(f, index, GroupKind::loop, "loop_kernel_source");
  KernelSource k;
  k.name = "capstep_loop_" + std::to_string(index);
  k.numel = g.numel;
  k.blocks = blocks_for(g.numel, kLoopThreads, 4096);
  Emitter em(f.program, k);
  em.add_inputs(g);
  em.add_outputs(g);
  const std::string body = loop_body(em, f.program, g);
  k.code = em.signature() +
           "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
           "       i += (long long)blockDim.x * gridDim.x) {\n" +
           body + "  }\n}\n";
  return k;
}

const char* kernel_mem_type(DType t) { return mem_type(t); }

std::string kernel_head() {
  return "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kLoopThreads) + ") ";
}

std::string device_function(const KernelSource& k, const std::string& qualifier) {
  std::string code = k.code;
  const std::string head = kernel_head();
  const size_t at_head = code.find(head + k.name + "(");
  if (at_head == std::string::npos || code.find(head, at_head + head.size()) != std::string::npos)
    throw Error("device_function: no single kernel head for " + k.name);
  code.replace(at_head, head.size(), "__device__ " + qualifier + " void ");
  const size_t sig_end = code.find("long long n) {", at_head);
  if (sig_end == std::string::npos) throw Error("device_function: unexpected signature of " + k.name);
  code.replace(sig_end, 14, "long long n, const unsigned blk, const unsigned grd) {");
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"blockIdx.x", "blk"}, {"gridDim.x", "grd"}})
    for (size_t at = code.find(from); at != std::string::npos; at = code.find(from, at + to.size()))
      code.replace(at, from.size(), to);
  return code;
}

// A wave: the kernels of its groups as __device__ functions that take their
// block index and block count as arguments, and one kernel that gives each
// its own range of blocks.
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"  // g++ 12 false positive in std::string's inlining (GCC bug 105329)
#endif
KernelSource wave_kernel_source(const Fused& f, int wave) {
  const std::vector<int>& groups = f.waves.at(static_cast<size_t>(wave));
  KernelSource k;
  k.name = "capstep_wave_" + std::to_string(wave);
  std::vector<KernelSource> ps;
  for (int gi : groups) ps.push_back(group_kernel_source(f, gi));
  // parameters: every part's inputs, then every part's outputs (p<index>)
  std::vector<std::vector<std::string>> arg(ps.size());
  for (int pass = 0; pass < 2; ++pass)
    for (size_t j = 0; j < ps.size(); ++j) {
      arg[j].resize(ps[j].params.size());
      for (size_t a = 0; a < ps[j].params.size(); ++a) {
        if ((static_cast<int>(a) < ps[j].n_inputs) != (pass == 0)) continue;
        arg[j][a] = "p" + std::to_string(k.params.size());
        k.params.push_back(ps[j].params[a]);
      }
      if (pass == 0) k.n_inputs = static_cast<int>(k.params.size());
    }
  const Program& p = f.program;
  std::ostringstream s;
  const std::string head = kernel_head();
  std::ostringstream body;
  body << "  unsigned b = blockIdx.x;\n";
  for (size_t j = 0; j < ps.size(); ++j) {
    s << device_function(ps[j], "__forceinline__") << "\n";
    body << "  if (b < " << ps[j].blocks << "u) {\n    " << ps[j].name << "(";
    for (const std::string& a : arg[j]) body << a << ", ";
    body << ps[j].numel << "LL, b, " << ps[j].blocks << "u);\n    return;\n  }\n  b -= " << ps[j].blocks << "u;\n";
    k.blocks += ps[j].blocks;
    k.numel += ps[j].numel;
  }
  s << head << k.name << "(";
  for (size_t a = 0; a < k.params.size(); ++a)
    s << (static_cast<int>(a) < k.n_inputs ? "const " : "") << mem_type(p.type(k.params[a]).dtype) << "* p" << a << ", ";
  s << "long long n) {\n" << body.str() << "}\n";
  k.code = s.str();
  return k;
}
#pragma GCC diagnostic pop

// A row group: a warp per row; for each level of reductions one pass over the
// row's C elements (the lanes stride it), the accumulators combined across the
// warp by shuffles, then the row members of the next level (every lane holds
// them), written by lane 0.
KernelSource row_kernel_source(const Fused& f, int index) {
  const Program& p = f.program;
  const Group& g = group_of_kind(f, index, GroupKind::row, "row_kernel_source");
  KernelSource k;
  k.name = "capstep_row_" + std::to_string(index);
  k.numel = g.numel;
  constexpr int kWarps = kLoopThreads / 32;
  k.blocks = blocks_for(g.rows, kWarps, 4096);
  Emitter em(p, k, &f.view);
  em.add_inputs(g);
  em.add_outputs(g);
  em.set_group(g);
  // levels: a reduction is one past its operand; others the max of their operands
  std::map<int, int> level;  // member value -> level
  auto lv = [&](int x) { auto it = level.find(x); return it == level.end() ? 0 : it->second; };
  int max_full = 0, max_level = 0;
  for (int d = g.first; d <= g.last; ++d) {
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    int l = 0;
    for (int x : e.inputs) l = std::max(l, lv(x));
    if (e.op == Op::reduce_sum || e.op == Op::reduce_max) ++l;
    level[e.out] = l;
    max_level = std::max(max_level, l);
    if (em.full(e.out)) max_full = std::max(max_full, l);
  }
  auto is_reduce = [&](int d) { const Op op = p.eqns[static_cast<size_t>(d)].op; return op == Op::reduce_sum || op == Op::reduce_max; };
  std::ostringstream b;
  b << "  const int lane = threadIdx.x & 31;\n"
    << "  for (long long r = blockIdx.x * " << kWarps << "LL + (threadIdx.x >> 5); r < " << g.rows
    << "LL; r += (long long)gridDim.x * " << kWarps << ") {\n";
  em.new_scope();
  for (int L = 0; L <= max_level; ++L) {
    // the reductions of level L are complete: their values, then the row members of level L
    for (int d = g.first; d <= g.last; ++d) {
      const int out = p.eqns[static_cast<size_t>(d)].out;
      if (lv(out) != L || em.full(out)) continue;
      if (is_reduce(d)) {
        b << em.acc_warp_reduce(d, "    ") << em.acc_value(d, "    ");
      } else {
        b << em.member_code(d, "r", "    ");
      }
      if (em.is_output(out)) b << "    if (lane == 0)" << em.store(out, "r", " ");
    }
    if (L > max_full) continue;
    // pass L over the row: the full members that the reductions of level L+1
    // and the outputs of level L need (earlier levels recomputed)
    std::set<int> need;
    for (int d = g.last; d >= g.first; --d) {
      const Eqn& e = p.eqns[static_cast<size_t>(d)];
      const bool want = (is_reduce(d) && lv(e.out) == L + 1) ||
                        (em.full(e.out) && lv(e.out) == L && em.is_output(e.out)) || need.count(e.out);
      if (!want) continue;
      if (em.full(e.out)) need.insert(e.out);
      for (int x : e.inputs)
        if (em.member(x) && em.full(x)) need.insert(x);
    }
    for (int d = g.first; d <= g.last; ++d)
      if (is_reduce(d) && lv(p.eqns[static_cast<size_t>(d)].out) == L + 1) b << em.acc_decl(d, "    ");
    b << "    for (long long c = lane; c < " << g.cols << "LL; c += 32) {\n"
      << "      const long long i = r * " << g.cols << "LL + c;\n";
    em.new_scope();
    for (int d = g.first; d <= g.last; ++d) {
      const int out = p.eqns[static_cast<size_t>(d)].out;
      if (is_reduce(d)) {
        if (lv(out) != L + 1) continue;
        std::string pre;
        const std::string val = em.reduce_operand(d, "      ", &pre);
        b << pre << em.acc_update(d, val, "      ");
      } else if (need.count(out)) {
        b << em.member_code(d, "i", "      ");
        if (em.is_output(out) && lv(out) == L) b << em.store(out, "i", "      ");
      }
    }
    b << "    }\n";
    em.new_scope();
  }
  b << "  }\n}\n";
  k.code = em.signature() + b.str();
  return k;
}

// A col group: blocks take tiles of kColTile kept elements k; in a block,
// thread t serves element k = tile * kColTile + t % kColTile and walks the
// reduced rows r = t / kColTile, + kColRowLanes, ... (element r*K + k: each
// warp reads kColRowLanes / 8 rows of kColTile consecutive elements, whole
// 32-byte sectors). The row lanes' partial sums are combined in a fixed
// order: across the warp by shuffles, then across the warps through shared
// memory; the first kColTile threads compute the kept-element members from
// the sums. Every block takes part in the __syncthreads of every tile.
constexpr int kColTile = 8;
constexpr int kColRowLanes = kLoopThreads / kColTile;  // 32
KernelSource col_kernel_source(const Fused& f, int index) {
  const Program& p = f.program;
  const Group& g = group_of_kind(f, index, GroupKind::col, "col_kernel_source");
  KernelSource k;
  k.name = "capstep_col_" + std::to_string(index);
  k.numel = g.numel;
  const int64_t tiles = (g.cols + kColTile - 1) / kColTile;
  k.blocks = blocks_for(tiles, 1, 4096);
  Emitter em(p, k);
  em.add_inputs(g);
  em.add_outputs(g);
  em.set_group(g);
  auto is_reduce = [&](int d) { const Op op = p.eqns[static_cast<size_t>(d)].op; return op == Op::reduce_sum || op == Op::reduce_max; };
  constexpr int kWarps = kLoopThreads / 32;
  std::ostringstream b;
  for (int d = g.first; d <= g.last; ++d)
    if (is_reduce(d)) b << em.acc_shared_decl(d, kWarps * kColTile, "  ");
  b << "  const int cl = threadIdx.x % " << kColTile << ", rl = threadIdx.x / " << kColTile << ";\n"
    << "  for (long long tile = blockIdx.x; tile < " << tiles << "LL; tile += gridDim.x) {\n"
    << "    const long long k = tile * " << kColTile << " + cl;\n";
  for (int d = g.first; d <= g.last; ++d)
    if (is_reduce(d)) b << em.acc_decl(d, "    ");
  b << "    if (k < " << g.cols << "LL) {\n"
    << "#pragma unroll 4\n"
    << "      for (long long r = rl; r < " << g.rows << "LL; r += " << kColRowLanes << ") {\n"
    << "        const long long i = r * " << g.cols << "LL + k;\n";
  em.new_scope();
  for (int d = g.first; d <= g.last; ++d) {
    const int out = p.eqns[static_cast<size_t>(d)].out;
    if (is_reduce(d)) {
      std::string pre;
      const std::string val = em.reduce_operand(d, "        ", &pre);
      b << pre << em.acc_update(d, val, "        ");
    } else if (em.full(out)) {
      b << em.member_code(d, "i", "        ");
      if (em.is_output(out)) b << em.store(out, "i", "        ");
    }
  }
  b << "      }\n    }\n";
  // lanes l, l^8, l^16, l^24 of a warp hold one element's rows: combine them,
  // then the warps' partials in warp order
  for (int d = g.first; d <= g.last; ++d)
    if (is_reduce(d)) b << em.acc_shfl_combine(d, {kColTile, 2 * kColTile}, "    ") << em.acc_share(d, "(threadIdx.x >> 5) * " + std::to_string(kColTile) + " + cl", "(threadIdx.x & 31) < " + std::to_string(kColTile), "    ");
  b << "    __syncthreads();\n"
    << "    if (threadIdx.x < " << kColTile << " && k < " << g.cols << "LL) {\n";
  em.new_scope();
  for (int d = g.first; d <= g.last; ++d)
    if (is_reduce(d)) b << em.acc_gather_shared(d, kWarps, kColTile, "cl", "      ");
  for (int d = g.first; d <= g.last; ++d) {
    const int out = p.eqns[static_cast<size_t>(d)].out;
    if (em.full(out)) continue;
    if (is_reduce(d)) b << em.acc_value(d, "      ");
    else b << em.member_code(d, "k", "      ");
    if (em.is_output(out)) b << em.store(out, "k", "      ");
  }
  b << "    }\n    __syncthreads();\n  }\n}\n";
  k.code = em.signature() + b.str();
  return k;
}

// A scatter group: out = operand, then out[idx[r], :] += upd[r, :] for r in
// order. A thread per output element (row t, column c) starts from the
// operand and adds, in index order, upd[r, c] for every r with idx[r] == t:
// the host's sums in the host's order, without atomics. An index outside
// [0, rows) is reported once (by element 0) through capstep_report.
KernelSource scatter_kernel_source(const Fused& f, int index) {
  const Program& p = f.program;
  const Group& g = group_of_kind(f, index, GroupKind::scatter, "scatter_kernel_source");
  const Eqn& e = p.eqns[static_cast<size_t>(g.first)];
  const Type& ot = p.type(e.out);
  const int64_t n = ot.numel(), rows = ot.shape.at(0), C = rows > 0 ? n / rows : 0, R = p.type(e.inputs[1]).numel();
  KernelSource k;
  k.name = "capstep_scatter_" + std::to_string(index);
  k.numel = n;
  k.blocks = blocks_for(n, kLoopThreads, 4096);
  Emitter em(p, k);
  em.add_inputs(g);
  em.add_outputs(g);
  em.set_group(g);
  const std::string T = reg_type(ot.dtype);
  std::ostringstream b;
  b << "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < " << n
    << "LL; i += (long long)blockDim.x * gridDim.x) {\n"
    << "    const long long t = i / " << C << "LL, c = i % " << C << "LL;\n"
    << "    " << T << " acc = " << em.load(e.inputs[0], "i") << ";\n"
    << "    for (long long r = 0; r < " << R << "LL; ++r) {\n"
    << "      const int j = " << em.load(e.inputs[1], "r") << ";\n"
    << "      if (j == t) acc = " << (ot.dtype == DType::bf16 ? "capstep_bf16_round(" : "(") << "capstep::scalar::add<" << T
    << ">(acc, " << em.load(e.inputs[2], "r * " + std::to_string(C) + "LL + c") << "));\n"
    << "      else if (i == 0 && (j < 0 || j >= " << rows << "LL)) capstep_report(" << g.first << ", r, j);\n"
    << "    }\n"
    << "    const " << T << " " << em.reg(e.out) << " = acc;\n";
  for (int x : g.outputs) b << em.store(x, "i", "    ");
  b << "  }\n}\n";
  k.code = em.signature() + b.str();
  return k;
}

KernelSource group_kernel_source(const Fused& f, int index) {
  switch (f.groups.at(static_cast<size_t>(index)).kind) {
    case GroupKind::loop: return loop_kernel_source(f, index);
    case GroupKind::row: return row_kernel_source(f, index);
    case GroupKind::col: return col_kernel_source(f, index);
    case GroupKind::gemm: return gemm_kernel_source(f, index);
    case GroupKind::scatter: return scatter_kernel_source(f, index);
    case GroupKind::single:
    case GroupKind::free: break;
  }
  throw Error("group_kernel_source: group " + std::to_string(index) + " is a " +
              group_kind_name(f.groups[static_cast<size_t>(index)].kind) + " group: no generated kernel");
}

std::vector<KernelSource> loop_kernel_sources(const Fused& f) {
  std::vector<KernelSource> ks;
  for (int g = 0; g < static_cast<int>(f.groups.size()); ++g)
    if (f.groups[static_cast<size_t>(g)].kind == GroupKind::loop && !f.groups[static_cast<size_t>(g)].outputs.empty())
      ks.push_back(loop_kernel_source(f, g));
  return ks;
}

std::vector<KernelSource> kernel_sources(const Fused& f) {
  std::vector<KernelSource> ks;
  for (int w = 0; w < static_cast<int>(f.waves.size()); ++w) {
    const std::vector<int>& gs = f.waves[static_cast<size_t>(w)];
    if (gs.size() == 1) ks.push_back(group_kernel_source(f, gs[0]));
    else ks.push_back(wave_kernel_source(f, w));
  }
  return ks;
}

std::string kernel_module_source(const std::vector<KernelSource>& ks) {
  std::string s =
      "// capstep: fused loop kernels, generated when the Program was compiled\n"
      "#include \"ir/scalar_math.h\"\n\n"
      // An index outside its table (gather_rows, scatter_add_rows): the first
      // one found is written where the executor points capstep_err (its
      // device error flag, the layout of cuda::k::DeviceError) and the
      // executor reports it after the step.
      "struct capstep_device_error { int flag; int eqn; long long position; long long value; };\n" +
      std::string(kBf16DeviceText) +
      // a block's shared array (a host emulation defines its own, per block)
      "#ifndef CAPSTEP_SHARED\n#define CAPSTEP_SHARED(T, name, n) __shared__ T name[n]\n#endif\n"
      "__device__ capstep_device_error* capstep_err = nullptr;\n"
      "__device__ __forceinline__ void capstep_report(int eqn, long long position, long long value) {\n"
      "  if (capstep_err != nullptr && atomicCAS(&capstep_err->flag, 0, 1) == 0) {\n"
      "    capstep_err->eqn = eqn;\n"
      "    capstep_err->position = position;\n"
      "    capstep_err->value = value;\n"
      "  }\n"
      "}\n\n";
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
