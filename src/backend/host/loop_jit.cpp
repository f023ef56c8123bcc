// The fused groups' elementwise runs compiled to AVX2 loops (loop_jit.h).
#include "backend/host/loop_jit.h"

#if defined(CAPSTEP_HAVE_XBYAK) && defined(__x86_64__)
#define CAPSTEP_LOOP_JIT 1
#include <xbyak/xbyak.h>
#else
#define CAPSTEP_LOOP_JIT 0
#endif

namespace capstep::host {

#if CAPSTEP_LOOP_JIT
namespace {

constexpr int kYmm = 16;
constexpr int kPtrRegs = 12;

class Code : public JitCode, public Xbyak::CodeGenerator {
 public:
  Code() : Xbyak::CodeGenerator(16384, Xbyak::DontSetProtectRWE) {}
  bool build(const JitLoop& lp);
};

bool supported(Op op) {
  return op == Op::add || op == Op::subtract || op == Op::multiply || op == Op::divide || op == Op::negate ||
         op == Op::broadcast_in_dim;
}

bool Code::build(const JitLoop& lp) {
  using namespace Xbyak;
  const int nin = static_cast<int>(lp.inputs.size());
  const int nv = nin + static_cast<int>(lp.insts.size());
  if (lp.num_ptrs < 0) return false;
  using K = JitLoop::Kind;
  const bool rows = lp.row_bytes > 0;
  if (lp.row_bytes < 0 || lp.row_bytes % 32 != 0 || lp.row_bytes > (int64_t{1} << 30)) return false;
  for (const JitLoop::Input& in : lp.inputs)
    if (in.ptr < 0 || in.ptr >= lp.num_ptrs || (!rows && (in.kind == K::row || in.kind == K::col))) return false;
  std::vector<int> last(static_cast<size_t>(nv), -1);  // the last instruction reading each value
  bool negates = false;
  for (int i = 0; i < static_cast<int>(lp.insts.size()); ++i) {
    const JitLoop::Inst& s = lp.insts[static_cast<size_t>(i)];
    const int v = nin + i;
    const bool unary = s.op == Op::negate || s.op == Op::broadcast_in_dim;
    if (!supported(s.op) || s.a < 0 || s.a >= v || (unary ? s.b != -1 : (s.b < 0 || s.b >= v))) return false;
    negates = negates || s.op == Op::negate;
    last[static_cast<size_t>(s.a)] = i;
    if (s.b >= 0) last[static_cast<size_t>(s.b)] = i;
  }
  std::vector<std::vector<int>> stores(static_cast<size_t>(nv));
  for (const JitLoop::Store& st : lp.stores) {
    if (st.value < nin || st.value >= nv || st.ptr < 0 || st.ptr >= lp.num_ptrs) return false;
    stores[static_cast<size_t>(st.value)].push_back(st.ptr);
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
  // rax: the byte offset into the full arrays; rdi (the pointer array is
  // read): the offset within the row, for col inputs.
  Label loop, row, done;
  xor_(eax, eax);
  test(rsi, rsi);
  jz(done, T_NEAR);
  if (rows) {
    L(row);
    for (int v = 0; v < nin; ++v) {
      const JitLoop::Input& in = lp.inputs[static_cast<size_t>(v)];
      if (in.kind != K::row || last[static_cast<size_t>(v)] < 0) continue;
      const Reg64& p = gprs[gpr[static_cast<size_t>(in.ptr)]];
      vbroadcastss(Ymm(reg[static_cast<size_t>(v)]), dword[p]);
      add(p, 4);
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
      vmovups(Ymm(r), ptr[gprs[gpr[static_cast<size_t>(in.ptr)]] + (in.kind == K::col ? rdi : rax)]);
    }
    const int ra = reg[static_cast<size_t>(s.a)], rb = s.b >= 0 ? reg[static_cast<size_t>(s.b)] : -1;
    for (int v : {s.a, s.b})  // operands read for the last time: their registers may take the result
      if (v >= 0 && last[static_cast<size_t>(v)] == i && !hoisted[static_cast<size_t>(v)] && reg[static_cast<size_t>(v)] >= 0) {
        used[reg[static_cast<size_t>(v)]] = false;
        reg[static_cast<size_t>(v)] = -1;
      }
    const int d = alloc();
    if (d < 0) return false;
    switch (s.op) {
      case Op::add: vaddps(Ymm(d), Ymm(ra), Ymm(rb)); break;
      case Op::subtract: vsubps(Ymm(d), Ymm(ra), Ymm(rb)); break;
      case Op::multiply: vmulps(Ymm(d), Ymm(ra), Ymm(rb)); break;
      case Op::divide: vdivps(Ymm(d), Ymm(ra), Ymm(rb)); break;
      case Op::negate: vxorps(Ymm(d), Ymm(ra), Ymm(sign)); break;  // the sign bit flipped, as -x
      default: vmovaps(Ymm(d), Ymm(ra)); break;                     // broadcast_in_dim: a copy, to be stored
    }
    const int v = nin + i;
    for (int p : stores[static_cast<size_t>(v)]) vmovups(ptr[gprs[gpr[static_cast<size_t>(p)]] + rax], Ymm(d));
    if (last[static_cast<size_t>(v)] < 0) used[d] = false;
    else reg[static_cast<size_t>(v)] = d;
  }
  add(rax, 32);
  if (rows) {
    add(rdi, 32);
    cmp(rdi, static_cast<uint32_t>(lp.row_bytes));
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
std::unique_ptr<JitCode> jit_compile(const JitLoop&) { return nullptr; }

#endif

}  // namespace capstep::host
