// gemm_kernel_source: the text of a gemm group's kernel (see kernel_source.h).
#include "backend/plan/kernel_source.h"

#include <sstream>
#include <string>
#include <vector>

#include "backend/plan/kernel_emitter.h"
#include "backend/plan/walk.h"

namespace capstep::plan {

using namespace emit;

// A gemm group: C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] for each of its
// dot_generals (all of one result type), their operands read in place through
// their view layouts (view_layout.h); then the group's other members, at the
// result's flat index, from the products in registers. Each thread computes a
// t x t tile of one batch's results, accumulating k in order (no FMA
// contraction: NVRTC runs with --fmad=false).
KernelSource gemm_kernel_source(const Fused& f, int index) {
  const Program& p = f.program;
  const Group& g = group_of_kind(f, index, GroupKind::gemm, "gemm_kernel_source");
  KernelSource k;
  k.name = "capstep_gemm_" + std::to_string(index);
  struct Dot {
    int eqn;
    DotLayout l;
  };
  std::vector<Dot> dots;
  for (int d = g.first; d <= g.last; ++d) {
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    if (e.op == Op::dot_general) dots.push_back({d, dot_layout(p, f.view, e, k.name)});
  }
  if (dots.empty()) throw Error("gemm_kernel_source: " + k.name + " has no dot_general");
  const Dot& d0 = dots[0];
  const int64_t B = d0.l.B, M = d0.l.M, N = d0.l.N;
  for (const Dot& d : dots)
    if (d.l.B != B || d.l.M != M || d.l.N != N)
      throw Error("gemm_kernel_source: the products of " + k.name + " differ in shape");
  const int64_t tile = B * M * N >= 4 * 2048 * 4 ? 4 : B * M * N >= 2 * 2048 * 2 ? 2 : 1;
  const int64_t tm = (M + tile - 1) / tile, tn = (N + tile - 1) / tile, total = B * tm * tn;
  k.numel = B * M * N;
  k.blocks = blocks_for(total, kLoopThreads, 4096);
  const std::string T = reg_type(p.type(p.eqns[static_cast<size_t>(d0.eqn)].out).dtype), t = std::to_string(tile);
  auto is_dot = [&](int d) { return p.eqns[static_cast<size_t>(d)].op == Op::dot_general; };
  // the epilogue's inputs; the products' operands come first (a0, b0, a1, b1, ...)
  Emitter em(p, k);
  em.set_group(g);
  for (int d = g.first; d <= g.last; ++d)
    if (!is_dot(d))
      for (int x : p.eqns[static_cast<size_t>(d)].inputs)
        if (!em.member(x)) em.add_input(x);
  em.add_outputs(g);
  std::vector<int> lead;
  std::string lead_text;
  for (size_t j = 0; j < dots.size(); ++j) {
    lead.push_back(dots[j].l.a_root);
    lead.push_back(dots[j].l.b_root);
    lead_text += std::string("const ") + mem_type(p.type(dots[j].l.a_root).dtype) + "* a" + std::to_string(j) + ", const " +
                 mem_type(p.type(dots[j].l.b_root).dtype) + "* b" + std::to_string(j) + ", ";
  }
  std::ostringstream s;
  s << em.signature(lead, lead_text) << "  // " << dots.size() << " product(s) of " << B << " x [" << M << " x K] * [K x "
    << N << "], " << t << " x " << t << " per thread";
  if (g.size() > static_cast<int>(dots.size())) s << ", " << g.size() - static_cast<int>(dots.size()) << " equations after";
  s << "\n"
    << "  for (long long w = blockIdx.x * (long long)blockDim.x + threadIdx.x; w < " << total
    << "LL; w += (long long)blockDim.x * gridDim.x) {\n"
    << "    const long long tn = w % " << tn << "LL, tm = (w / " << tn << "LL) % " << tm << "LL, bb = w / " << tn * tm << "LL;\n"
    << "    bool okm[" << t << "], okn[" << t << "];\n"
    << "#pragma unroll\n    for (int i = 0; i < " << t << "; ++i) {\n"
    << "      okm[i] = tm * " << t << " + i < " << M << "LL;\n      okn[i] = tn * " << t << " + i < " << N << "LL;\n    }\n";
  for (size_t j = 0; j < dots.size(); ++j) {
    const DotLayout& d = dots[j].l;
    const std::string J = std::to_string(j);
    // bf16 operands: widened to f32 on load (exact), or f32 roots of bf16
    // operand views rounded to bf16 on load; f32 products and sums
    const DType at = p.type(d.a_root).dtype, bt = p.type(d.b_root).dtype;
    s << "    " << T << " acc" << J << "[" << t << "][" << t << "] = {};\n    {\n"
      << "      const long long oa = " << offset_code(d.a_b, "bb") << ", ob = " << offset_code(d.b_b, "bb") << ";\n"
      << "      long long am[" << t << "], bn[" << t << "];\n"
      << "#pragma unroll\n      for (int i = 0; i < " << t << "; ++i) {\n"
      << "        const long long m = tm * " << t << " + i, nn = tn * " << t << " + i;\n"
      << "        am[i] = okm[i] ? " << offset_code(d.a_m, "m") << " : 0;\n"
      << "        bn[i] = okn[i] ? " << offset_code(d.b_n, "nn") << " : 0;\n      }\n"
      << "      for (long long kk = 0; kk < " << d.K << "LL; ++kk) {\n"
      << "        const long long ak = oa + " << offset_code(d.a_k, "kk") << ", bk = ob + " << offset_code(d.b_k, "kk") << ";\n"
      << "        " << T << " av[" << t << "], bv[" << t << "];\n"
      << "#pragma unroll\n        for (int i = 0; i < " << t << "; ++i) {\n"
      << "          av[i] = okm[i] ? " << operand_load(at, d.a_round, "a" + J + "[ak + am[i]]") << " : " << T << "(0);\n"
      << "          bv[i] = okn[i] ? " << operand_load(bt, d.b_round, "b" + J + "[bk + bn[i]]") << " : " << T << "(0);\n        }\n"
      << "#pragma unroll\n        for (int i = 0; i < " << t << "; ++i)\n"
      << "#pragma unroll\n          for (int j = 0; j < " << t << "; ++j) acc" << J << "[i][j] = acc" << J
      << "[i][j] + av[i] * bv[j];\n      }\n    }\n";
  }
  s << "#pragma unroll\n    for (int i = 0; i < " << t << "; ++i)\n"
    << "#pragma unroll\n      for (int j = 0; j < " << t << "; ++j) {\n"
    << "        if (!okm[i] || !okn[j]) continue;\n"
    << "        const long long ix = (bb * " << M << "LL + tm * " << t << " + i) * " << N << "LL + tn * " << t << " + j;\n";
  for (size_t j = 0; j < dots.size(); ++j)
    s << "        const " << T << " " << em.reg(p.eqns[static_cast<size_t>(dots[j].eqn)].out) << " = acc" << j << "[i][j];\n";
  em.new_scope();
  for (int d = g.first; d <= g.last; ++d)
    if (!is_dot(d)) s << em.member_code(d, "ix", "        ");
  for (int x : g.outputs) s << em.store(x, "ix", "        ");
  s << "      }\n  }\n}\n";
  k.code = s.str();
  return k;
}

}  // namespace capstep::plan
