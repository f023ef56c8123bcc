// The fused groups' elementwise runs compiled to AVX2 loops (loop_jit.h).
#include "backend/host/loop_jit.h"

#include "backend/host/interpreter.h"

#if defined(CAPSTEP_HAVE_XBYAK) && defined(__x86_64__)
#define CAPSTEP_LOOP_JIT 1
#include <xbyak/xbyak.h>

#include <map>

#include "ir/scalar_math.h"
#else
#define CAPSTEP_LOOP_JIT 0
#endif

namespace capstep::host {

#if CAPSTEP_LOOP_JIT
namespace {

constexpr int kYmm = 16;
constexpr int kPtrRegs = 12;

uint32_t bits_of(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
}

class Code : public JitCode, public Xbyak::CodeGenerator {
 public:
  Code() : Xbyak::CodeGenerator(16384, Xbyak::DontSetProtectRWE) {}
  bool build(const JitLoop& lp);

 private:
  std::map<uint32_t, Xbyak::Label> consts_;
  // 8 lanes of a constant (bits), in the pool after the code.
  Xbyak::Address c(uint32_t b) { return yword[rip + consts_[b]]; }
  Xbyak::Address f(float x) { return c(bits_of(x)); }
  void emit_exp_reduced(const Xbyak::Ymm& x, const Xbyak::Ymm& k, const Xbyak::Ymm& r, const Xbyak::Ymm& p,
                        const Xbyak::Ymm& q);
  void emit_exp(const Xbyak::Ymm& d, const Xbyak::Ymm& x, const int* t);
  void emit_tanh(const Xbyak::Ymm& d, const Xbyak::Ymm& x, const int* t, const Xbyak::Ymm& sign);
  void emit_round_bf16(const Xbyak::Ymm& d, const Xbyak::Ymm& t1, const Xbyak::Ymm& t2);
};

// bf16::from_float in place on d, its result kept as an f32 (low 16 bits
// zero): (b + 0x7FFF + ((b >> 16) & 1)) with the low half cleared, or for a
// NaN b | 0x00400000 with it cleared. t1 and t2 are scratch.
void Code::emit_round_bf16(const Xbyak::Ymm& d, const Xbyak::Ymm& t1, const Xbyak::Ymm& t2) {
  vpsrld(t1, d, 16);
  vpand(t1, t1, c(1));
  vpaddd(t1, t1, d);
  vpaddd(t1, t1, c(0x7FFF));
  vpand(t1, t1, c(0xFFFF0000u));
  vpor(t2, d, c(0x00400000));
  vpand(t2, t2, c(0xFFFF0000u));
  vcmpunordps(d, d, d);  // NaN lanes
  vblendvps(d, t1, t2, d);
}

// scalar_math.h's f32 exp and tanh, operation for operation (the same
// constants, the same order, a compare and blend for each ?:), so the same
// bits. The tests check every 7919th float against the scalar functions.

// k = round(x / ln2) as a float, r = x - k ln2, p = exp_reduced's result
// (e^r); q is scratch. x is kept.
void Code::emit_exp_reduced(const Xbyak::Ymm& x, const Xbyak::Ymm& k, const Xbyak::Ymm& r, const Xbyak::Ymm& p,
                            const Xbyak::Ymm& q) {
  vmulps(k, x, f(1.44269504088896341f));
  vaddps(k, k, f(12582912.0f));
  vsubps(k, k, f(12582912.0f));
  vmulps(r, k, f(0.693359375f));
  vsubps(r, x, r);
  vmulps(q, k, f(-2.12194440e-4f));
  vsubps(r, r, q);
  vmulps(p, r, f(1.9875691500e-4f));
  vaddps(p, p, f(1.3981999507e-3f));
  vmulps(p, p, r);
  vaddps(p, p, f(8.3334519073e-3f));
  vmulps(p, p, r);
  vaddps(p, p, f(4.1665795894e-2f));
  vmulps(p, p, r);
  vaddps(p, p, f(1.6666665459e-1f));
  vmulps(p, p, r);
  vaddps(p, p, f(5.0000001201e-1f));
  vmulps(p, p, r);  // p * r * r + r + 1
  vmulps(p, p, r);
  vaddps(p, p, r);
  vaddps(p, p, f(1.0f));
}

// exponential<float>: its clamp to [-104, 89] as a choice at the end (as GCC
// compiles it): below -104 the formula's value at -104, above 89 its value at
// 89 (the same bits, taken from the scalar function), and the formula run on
// 0 in those lanes meanwhile. Run on the clamped value, the formula's last
// multiply makes a subnormal or zero there, which costs this CPU a microcode
// assist per vector: the attention's masked scores (-1e9) made its softmax's
// exp three times slower.
void Code::emit_exp(const Xbyak::Ymm& d, const Xbyak::Ymm& x, const int* t) {
  using Xbyak::Ymm;
  const Ymm xs(t[0]), k(t[1]), r(t[2]), p(t[3]), q(t[4]), lo(t[5]);
  const Ymm& hi = d;
  vcmpltps(lo, x, f(-104.0f));  // x < -104
  vmovaps(hi, f(89.0f));
  vcmpltps(hi, hi, x);          // x > 89
  vorps(xs, lo, hi);
  vxorps(k, k, k);
  vblendvps(xs, x, k, xs);
  emit_exp_reduced(xs, k, r, p, q);
  vcvttps2dq(k, k);      // ki
  vpsrld(q, k, 31);      // k1 = ki / 2, toward zero
  vpaddd(q, q, k);
  vpsrad(q, q, 1);
  vpsubd(k, k, q);       // k2 = ki - k1
  vpaddd(q, q, c(127));  // 2^k1, 2^k2
  vpslld(q, q, 23);
  vpaddd(k, k, c(127));
  vpslld(k, k, 23);
  vmulps(p, p, q);
  vmulps(p, p, k);
  vblendvps(p, p, f(scalar::exponential<float>(-104.0f)), lo);
  vblendvps(p, p, f(scalar::exponential<float>(89.0f)), hi);
  vcmpunordps(lo, x, x);  // x != x ? x : y
  vblendvps(d, p, x, lo);
}

void Code::emit_tanh(const Xbyak::Ymm& d, const Xbyak::Ymm& x, const int* t, const Xbyak::Ymm& sign) {
  using Xbyak::Ymm;
  const Ymm ax(t[0]), z(t[1]), p(t[2]), small(t[3]), u(t[4]), w(t[5]);
  vcmpltps(u, x, f(0.0f));  // ax = x < 0 ? -x : x
  vxorps(w, x, sign);
  vblendvps(ax, x, w, u);
  vmulps(z, ax, ax);
  vmulps(p, z, f(-5.70498872745e-3f));
  vaddps(p, p, f(2.06390887954e-2f));
  vmulps(p, p, z);
  vsubps(p, p, f(5.37397155531e-2f));
  vmulps(p, p, z);
  vaddps(p, p, f(1.33314422036e-1f));
  vmulps(p, p, z);
  vsubps(p, p, f(3.33332819422e-1f));
  vmulps(small, ax, z);  // ax + ax * z * p
  vmulps(small, small, p);
  vaddps(small, ax, small);
  vminps(u, ax, f(10.0f));  // e = exp_nonpositive_small(-2 * (ax < 10 ? ax : 10))
  vmulps(u, u, f(-2.0f));
  emit_exp_reduced(u, z, w, p, d);  // k in z, r in w, e^r in p
  vcvttps2dq(z, z);
  vpaddd(z, z, c(127));
  vpslld(z, z, 23);
  vmulps(p, p, z);          // e
  vmovaps(u, f(1.0f));      // big = (1 - e) / (1 + e)
  vsubps(u, u, p);
  vaddps(p, p, f(1.0f));
  vdivps(u, u, p);
  vcmpltps(w, ax, f(0.625f));  // m = ax < 0.625 ? small : big
  vblendvps(u, u, small, w);
  vxorps(z, z, z);             // x < 0 ? -m : (x > 0 ? m : x)
  vcmpltps(w, z, x);
  vblendvps(p, x, u, w);
  vxorps(u, u, sign);
  vcmpltps(w, x, f(0.0f));
  vblendvps(d, p, u, w);
}

// The instructions' operand counts: the primitives', and the copy.
int operands(Op op) { return op == Op::broadcast_in_dim ? 1 : jit_operands(op); }


bool Code::build(const JitLoop& lp) {
  using namespace Xbyak;
  const int nin = static_cast<int>(lp.inputs.size());
  const int nv = nin + static_cast<int>(lp.insts.size());
  if (lp.num_ptrs < 0) return false;
  using K = JitLoop::Kind;
  const bool rows = lp.row_bytes > 0;
  if (lp.row_bytes < 0 || lp.row_bytes % 32 != 0 || lp.row_bytes > (int64_t{1} << 30)) return false;
  for (const JitLoop::Input& in : lp.inputs)
    if (in.ptr < 0 || in.ptr >= lp.num_ptrs || (!rows && (in.kind == K::row || in.kind == K::col)) ||
        (in.bf16 && in.kind != K::full))
      return false;
  std::vector<int> last(static_cast<size_t>(nv), -1);  // the last instruction reading each value
  bool negates = false;
  for (int i = 0; i < static_cast<int>(lp.insts.size()); ++i) {
    const JitLoop::Inst& s = lp.insts[static_cast<size_t>(i)];
    const int v = nin + i;
    const int arity = operands(s.op);
    if (arity == 0 || s.a < 0 || s.a >= v || (arity == 1 ? s.b != -1 : (s.b < 0 || s.b >= v))) return false;
    negates = negates || s.op == Op::negate || s.op == Op::tanh;
    last[static_cast<size_t>(s.a)] = i;
    if (s.b >= 0) last[static_cast<size_t>(s.b)] = i;
  }
  std::vector<std::vector<const JitLoop::Store*>> stores(static_cast<size_t>(nv));
  for (const JitLoop::Store& st : lp.stores) {
    if (st.value < nin || st.value >= nv || st.ptr < 0 || st.ptr >= lp.num_ptrs ||
        (st.bf16 && !lp.insts[static_cast<size_t>(st.value - nin)].bf16))
      return false;
    stores[static_cast<size_t>(st.value)].push_back(&st);
  }

  // A general register for every pointer the loop reads or writes through;
  // splat inputs are broadcast into a ymm register once, before the loop.
  const Reg64 gprs[kPtrRegs] = {rcx, rdx, r8, r9, r10, r11, rbx, rbp, r12, r13, r14, r15};
  std::vector<int> gpr(static_cast<size_t>(lp.num_ptrs), -1);
  int ngpr = 0;
  auto need = [&](int p) {
    if (gpr[static_cast<size_t>(p)] >= 0) return true;
    if (ngpr == kPtrRegs) return false;
    gpr[static_cast<size_t>(p)] = ngpr++;
    return true;
  };
  for (int v = 0; v < nin; ++v)
    if (last[static_cast<size_t>(v)] >= 0 && lp.inputs[static_cast<size_t>(v)].kind != K::splat &&
        !need(lp.inputs[static_cast<size_t>(v)].ptr))
      return false;
  for (const JitLoop::Store& st : lp.stores)
    if (!need(st.ptr)) return false;

  bool used[kYmm] = {};
  auto alloc = [&]() {
    for (int r = 0; r < kYmm; ++r)
      if (!used[r]) {
        used[r] = true;
        return r;
      }
    return -1;
  };
  std::vector<int> reg(static_cast<size_t>(nv), -1);
  std::vector<char> hoisted(static_cast<size_t>(nv), 0);

  for (int g = 6; g < ngpr; ++g) push(gprs[g]);  // callee-saved
  for (int p = 0; p < lp.num_ptrs; ++p)
    if (gpr[static_cast<size_t>(p)] >= 0) mov(gprs[gpr[static_cast<size_t>(p)]], ptr[rdi + 8 * p]);
  // Splat and row inputs: a register each for the whole loop (a row's
  // broadcast at the start of each row).
  for (int v = 0; v < nin; ++v) {
    const JitLoop::Input& in = lp.inputs[static_cast<size_t>(v)];
    if ((in.kind != K::splat && in.kind != K::row) || last[static_cast<size_t>(v)] < 0) continue;
    const int r = alloc();
    if (r < 0) return false;
    reg[static_cast<size_t>(v)] = r;
    hoisted[static_cast<size_t>(v)] = 1;
    if (in.kind == K::splat) {
      mov(rax, ptr[rdi + 8 * in.ptr]);
      vbroadcastss(Ymm(r), dword[rax]);
    }
  }
  int sign = -1;
  if (negates) {
    sign = alloc();
    if (sign < 0) return false;
    mov(eax, 0x80000000u);
    vmovd(Xmm(sign), eax);
    vbroadcastss(Ymm(sign), Xmm(sign));
  }
  // rax: the element index into the full arrays; rdi (the pointer array is
  // read): the index within the row, for col inputs.
  const int64_t row_elems = lp.row_bytes / 4;
  auto at = [&](int p, bool bf16, bool col = false) {
    const Reg64& base = gprs[gpr[static_cast<size_t>(p)]];
    return col ? ptr[base + rdi * 4] : bf16 ? ptr[base + rax * 2] : ptr[base + rax * 4];
  };
  Label loop, row, done;
  xor_(eax, eax);
  test(rsi, rsi);
  jz(done, T_NEAR);
  if (rows) {
    L(row);
    std::vector<char> advanced(static_cast<size_t>(lp.num_ptrs), 0);
    for (int v = 0; v < nin; ++v) {
      const JitLoop::Input& in = lp.inputs[static_cast<size_t>(v)];
      if (in.kind != K::row || last[static_cast<size_t>(v)] < 0) continue;
      vbroadcastss(Ymm(reg[static_cast<size_t>(v)]), dword[gprs[gpr[static_cast<size_t>(in.ptr)]]]);
    }
    for (int v = 0; v < nin; ++v) {  // each row pointer once, even where two inputs read it
      const JitLoop::Input& in = lp.inputs[static_cast<size_t>(v)];
      if (in.kind != K::row || last[static_cast<size_t>(v)] < 0 || advanced[static_cast<size_t>(in.ptr)]) continue;
      advanced[static_cast<size_t>(in.ptr)] = 1;
      add(gprs[gpr[static_cast<size_t>(in.ptr)]], 4);
    }
    xor_(edi, edi);
  }
  L(loop);
  for (int i = 0; i < static_cast<int>(lp.insts.size()); ++i) {
    const JitLoop::Inst& s = lp.insts[static_cast<size_t>(i)];
    for (int v : {s.a, s.b}) {
      if (v < 0 || v >= nin || reg[static_cast<size_t>(v)] >= 0) continue;
      const int r = alloc();
      if (r < 0) return false;
      reg[static_cast<size_t>(v)] = r;
      const JitLoop::Input& in = lp.inputs[static_cast<size_t>(v)];
      if (in.bf16) {
        vpmovzxwd(Ymm(r), at(in.ptr, true));
        vpslld(Ymm(r), Ymm(r), 16);
      } else {
        vmovups(Ymm(r), at(in.ptr, false, in.kind == K::col));
      }
    }
    const int ra = reg[static_cast<size_t>(s.a)], rb = s.b >= 0 ? reg[static_cast<size_t>(s.b)] : -1;
    auto free_operands = [&] {  // operands read for the last time
      for (int v : {s.a, s.b})
        if (v >= 0 && last[static_cast<size_t>(v)] == i && !hoisted[static_cast<size_t>(v)] &&
            reg[static_cast<size_t>(v)] >= 0) {
          used[reg[static_cast<size_t>(v)]] = false;
          reg[static_cast<size_t>(v)] = -1;
        }
    };
    int d = -1;
    if (s.op == Op::exponential || s.op == Op::tanh) {
      // Several instructions: the operand is read to the end, so its register
      // is kept until then, and the temporaries are others.
      d = alloc();
      int t[6];
      for (int& r : t)
        if ((r = alloc()) < 0) return false;
      if (d < 0) return false;
      if (s.op == Op::exponential) emit_exp(Ymm(d), Ymm(ra), t);
      else emit_tanh(Ymm(d), Ymm(ra), t, Ymm(sign));
      for (int r : t) used[r] = false;
      free_operands();
    } else {
      free_operands();  // their registers may take the result
      d = alloc();
      if (d < 0) return false;
    }
    if (op_kind(s.op) == OpKind::binary) {
      switch (binary_op(s.op)) {
        case BinaryOp::add: vaddps(Ymm(d), Ymm(ra), Ymm(rb)); break;
        case BinaryOp::subtract: vsubps(Ymm(d), Ymm(ra), Ymm(rb)); break;
        case BinaryOp::multiply: vmulps(Ymm(d), Ymm(ra), Ymm(rb)); break;
        case BinaryOp::divide: vdivps(Ymm(d), Ymm(ra), Ymm(rb)); break;
        case BinaryOp::maximum: vmovaps(Ymm(d), Ymm(ra)); break;  // operands() is 0: build() refused it
      }
    } else if (op_kind(s.op) == OpKind::unary) {
      switch (unary_op(s.op)) {
        case UnaryOp::exponential:
        case UnaryOp::tanh: break;
        case UnaryOp::negate: vxorps(Ymm(d), Ymm(ra), Ymm(sign)); break;  // the sign bit flipped, as -x
        case UnaryOp::log: case UnaryOp::rsqrt: case UnaryOp::sqrt:
          vmovaps(Ymm(d), Ymm(ra));  // operands() is 0: build() refused them
          break;
      }
    } else {
      // broadcast_in_dim, convert: a copy (a convert to bf16 rounded below);
      // operands() is 0 for the rest, so build() refused them
      vmovaps(Ymm(d), Ymm(ra));
    }
    const int v = nin + i;
    bool store16 = false;
    for (const JitLoop::Store* st : stores[static_cast<size_t>(v)]) store16 = store16 || st->bf16;
    if (s.bf16 || store16) {
      const int t1 = alloc(), t2 = alloc();
      if (t1 < 0 || t2 < 0) return false;
      if (s.bf16) emit_round_bf16(Ymm(d), Ymm(t1), Ymm(t2));
      for (const JitLoop::Store* st : stores[static_cast<size_t>(v)])
        if (st->bf16) {  // the high halves, packed
          vpsrld(Ymm(t1), Ymm(d), 16);
          vextracti128(Xmm(t2), Ymm(t1), 1);
          vpackusdw(Xmm(t1), Xmm(t1), Xmm(t2));
          vmovdqu(at(st->ptr, true), Xmm(t1));
        }
      used[t1] = used[t2] = false;
    }
    for (const JitLoop::Store* st : stores[static_cast<size_t>(v)])
      if (!st->bf16) vmovups(at(st->ptr, false), Ymm(d));
    if (last[static_cast<size_t>(v)] < 0) used[d] = false;
    else reg[static_cast<size_t>(v)] = d;
  }
  add(rax, 8);
  if (rows) {
    add(rdi, 8);
    cmp(rdi, static_cast<uint32_t>(row_elems));
    jb(loop, T_NEAR);
    cmp(rax, rsi);
    jb(row, T_NEAR);
  } else {
    cmp(rax, rsi);
    jb(loop, T_NEAR);
  }
  L(done);
  vzeroupper();
  for (int g = ngpr - 1; g >= 6; --g) pop(gprs[g]);
  ret();
  // The constants exp and tanh read, 8 lanes each.
  for (auto& [b, label] : consts_) {
    align(32);
    L(label);
    for (int l = 0; l < 8; ++l) dd(b);
  }
  setProtectModeRE();
  fn = getCode<JitFn>();
  return true;
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

}  // namespace

bool jit_available() {
  static const bool yes = cpu_has_avx2();
  return yes;
}

const char* jit_missing() { return jit_available() ? "" : "this CPU has no AVX2"; }

std::unique_ptr<JitCode> jit_compile(const JitLoop& loop) {
  if (!jit_available()) return nullptr;
  try {
    auto c = std::make_unique<Code>();
    if (!c->build(loop)) return nullptr;
    return c;
  } catch (const Xbyak::Error&) {
    return nullptr;
  }
}

#else

bool jit_available() { return false; }
const char* jit_missing() { return "this build has no Xbyak"; }
std::unique_ptr<JitCode> jit_compile(const JitLoop&) { return nullptr; }

#endif

int jit_operands(Op op) {
  if (op == Op::convert) return 1;
  if (op_kind(op) == OpKind::binary) {
    switch (binary_op(op)) {
      case BinaryOp::add:
      case BinaryOp::subtract:
      case BinaryOp::multiply:
      case BinaryOp::divide: return 2;
      case BinaryOp::maximum: return 0;
    }
  }
  if (op_kind(op) == OpKind::unary) {
    switch (unary_op(op)) {
      case UnaryOp::negate:
      case UnaryOp::exponential:
      case UnaryOp::tanh: return 1;
      case UnaryOp::log: case UnaryOp::rsqrt: case UnaryOp::sqrt: return 0;
    }
  }
  return 0;  // no other kind compiles
}

std::string host_loops_line(const InterpreterOptions& o) {
  if (!o.fuse) return "elementwise work one pass per primitive (fusion off)";
  if (!o.jit) return "fused groups' elementwise runs member by member (jit off)";
  if (!jit_available()) return std::string("fused groups' elementwise runs member by member (") + jit_missing() + ")";
  return "fused groups' elementwise runs compiled to AVX2 loops (Xbyak)";
}

}  // namespace capstep::host
