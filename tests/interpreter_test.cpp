// The host interpreter's own properties: its f32 exp and tanh formulas, the
// order of its long reductions, dot_general in every layout with the scratch
// its packing takes, layout ops between fused groups, the error messages, the
// memory plan's reuse, and a steady-state run that allocates nothing (this
// binary replaces the global allocation functions). Each primitive in each
// dtype and shape against its definition, on every backend, is
// tests/backend_ops_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>

#include "backend/host/gemm.h"
#include "capstep/host_adamw.h"
#include "backend/host/parallel.h"
#include "capstep/array.h"
#include "capstep/autodiff.h"
#include "capstep/backend.h"
#include "backend/host/interpreter.h"
#include "capstep/ir.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"
#include "ir/scalar_math.h"

#include "test_util.h"

// The replaced operator delete frees what the replaced operator new mallocs;
// GCC cannot see that pairing.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

// ---- allocation counting ------------------------------------------------------
// Every operator new in this binary comes here; while g_counting is set each call
// is counted. Outside AddressSanitizer (which owns malloc) the C allocation
// functions are interposed too, so that OpenBLAS or libstdc++ allocating behind
// our back would be counted as well.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
void note_allocation() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
}
void* checked(void* p) {
  if (!p) throw std::bad_alloc();
  return p;
}
size_t round_to(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* malloc(size_t n) {
  note_allocation();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t m) {
  note_allocation();
  return __libc_calloc(n, m);
}
void* realloc(void* p, size_t n) {
  note_allocation();
  return __libc_realloc(p, n);
}
void* memalign(size_t a, size_t n) {
  note_allocation();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  note_allocation();
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  note_allocation();
  void* p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}
// operator new then goes through the counted malloc above.
void* operator new(size_t n) { return checked(std::malloc(n ? n : 1)); }
void* operator new[](size_t n) { return checked(std::malloc(n ? n : 1)); }
void* operator new(size_t n, std::align_val_t a) {
  return checked(std::aligned_alloc(static_cast<size_t>(a), round_to(n ? n : 1, static_cast<size_t>(a))));
}
void* operator new[](size_t n, std::align_val_t a) {
  return checked(std::aligned_alloc(static_cast<size_t>(a), round_to(n ? n : 1, static_cast<size_t>(a))));
}
#else
void* operator new(size_t n) {
  note_allocation();
  return checked(std::malloc(n ? n : 1));
}
void* operator new[](size_t n) {
  note_allocation();
  return checked(std::malloc(n ? n : 1));
}
void* operator new(size_t n, std::align_val_t a) {
  note_allocation();
  return checked(std::aligned_alloc(static_cast<size_t>(a), round_to(n ? n : 1, static_cast<size_t>(a))));
}
void* operator new[](size_t n, std::align_val_t a) {
  note_allocation();
  return checked(std::aligned_alloc(static_cast<size_t>(a), round_to(n ? n : 1, static_cast<size_t>(a))));
}
#endif
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try { return operator new(n); } catch (...) { return nullptr; }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try { return operator new[](n); } catch (...) { return nullptr; }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

using namespace capstep;
using capstep::test::expect_error;
using ::testing::HasSubstr;

namespace {

// ---- helpers ----------------------------------------------------------------

Type T(DType d, Shape s) { return {d, std::move(s)}; }

// Deterministic values in [lo, hi).
std::vector<double> values(int64_t n, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t s = 0x9E3779B97F4A7C15ull ^ seed;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<double>(s >> 11) / 9007199254740992.0;
  }
  return v;
}
std::vector<double> ints(int64_t n, uint32_t seed, int lo, int hi) {
  std::vector<double> v = values(n, seed, lo, hi);
  for (auto& x : v) x = std::floor(x);
  return v;
}
Array random(const Type& t, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  if (t.dtype == DType::i32) return Array::from_doubles(t, ints(t.numel(), seed, static_cast<int>(lo), static_cast<int>(hi)));
  if (t.dtype == DType::i1) return Array::from_doubles(t, ints(t.numel(), seed, 0, 2));
  return Array::from_doubles(t, values(t.numel(), seed, lo, hi));
}

Shape unravel(int64_t i, const Shape& s) {
  Shape idx(s.size());
  for (size_t a = s.size(); a-- > 0;) {
    idx[a] = i % s[a];
    i /= s[a];
  }
  return idx;
}
int64_t ravel(const Shape& idx, const Shape& s) {
  int64_t i = 0;
  for (size_t a = 0; a < s.size(); ++a) i = i * s[a] + idx[a];
  return i;
}

// Runs a one-output program.
Array run1(const Program& p, const std::vector<Array>& in) { return host::run(p, in).at(0); }

// Exact comparison for results that follow the same IEEE operations.
void expect_exact(const Array& got, const Type& t, const std::vector<double>& want) {
  ASSERT_EQ(got.type(), t) << got.type().str();
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
  for (int64_t i = 0; i < got.numel(); ++i) {
    double w = want[static_cast<size_t>(i)], g = got.get(i);
    if (std::isnan(w)) EXPECT_TRUE(std::isnan(g)) << "element " << i;
    else EXPECT_EQ(g, w) << "element " << i;
  }
}

void expect_near(const Array& got, const Type& t, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.type(), t) << got.type().str();
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
  for (int64_t i = 0; i < got.numel(); ++i) {
    double w = want[static_cast<size_t>(i)];
    EXPECT_NEAR(got.get(i), w, rel * std::max(1.0, std::fabs(w))) << "element " << i;
  }
}

// ---- elementwise ------------------------------------------------------------

Program unary_program(Op op, const Type& t) {
  Program p;
  int a = p.add_input("a", t);
  p.add_output("out", p.add_eqn(op, {a}, {}));
  return p;
}

// The host's f32 tanh is its own vectorised formula (not libm's): within 2 ulp
// of the correctly rounded value over the whole useful range, exact at the
// special values.
TEST(Elementwise, TanhF32WithinTwoUlp) {
  std::vector<float> xs;
  for (float x = 1e-30f; x < 12.0f; x *= 1.0007f) {
    xs.push_back(x);
    xs.push_back(-x);
  }
  for (float x : {0.0f, -0.0f, 0.625f, -0.625f, 0.62499994f, 9.0f, 20.0f, -20.0f, 1e-45f, INFINITY, -INFINITY, NAN})
    xs.push_back(x);
  const Type t = T(DType::f32, {static_cast<int64_t>(xs.size())});
  Array out = run1(unary_program(Op::tanh, t), {Array::f32(t.shape, xs)});
  int64_t worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float got = out.data<float>()[i], want = static_cast<float>(std::tanh(static_cast<double>(xs[i])));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got));
      continue;
    }
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << xs[i];
    int32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    worst = std::max<int64_t>(worst, std::llabs(static_cast<int64_t>(a) - b));
    EXPECT_LE(std::llabs(static_cast<int64_t>(a) - b), 2) << "tanh(" << xs[i] << ") = " << got << ", want " << want;
  }
  EXPECT_EQ(out.data<float>()[xs.size() - 3], 1.0f);   // tanh(inf)
  EXPECT_EQ(out.data<float>()[xs.size() - 2], -1.0f);  // tanh(-inf)
}

// tanh takes e^(-2|x|) from exp_nonpositive_small, exponential<float> without
// the steps that cannot act on [-20, 0]: the same bits there (every float of
// [-20, 0] was compared once, outside the suite; here every 257th).
TEST(Elementwise, TanhsExpIsExpOnItsRange) {
  int64_t checked = 0, differ = 0;
  for (uint32_t u = 0x80000000u; u <= 0xC1A00000u; u += 257) {  // -0 down to -20
    float x;
    std::memcpy(&x, &u, 4);
    const float a = scalar::exponential<float>(x), b = scalar::exp_nonpositive_small(x);
    uint32_t ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    ++checked;
    if (ua != ub && differ++ < 3) ADD_FAILURE() << "exp(" << x << "): " << a << " against " << b;
  }
  EXPECT_EQ(differ, 0);
  EXPECT_GT(checked, 4000000);
}

// The f32 exp is its own vectorised formula too: within 2 ulp over the whole
// range, subnormal results included, and exact at the special values.
TEST(Elementwise, ExpF32WithinTwoUlp) {
  std::vector<float> xs;
  for (float x = -104.0f; x < 89.0f; x += 0.0137f) xs.push_back(x);
  for (float x = 1e-30f; x < 1.0f; x *= 1.01f) {
    xs.push_back(x);
    xs.push_back(-x);
  }
  for (float x : {0.0f, -0.0f, 88.72f, 88.7228f, -87.33f, -103.27f, -103.97f}) xs.push_back(x);
  const size_t specials = xs.size();
  for (float x : {89.0f, 1000.0f, INFINITY, -104.0f, -1000.0f, -INFINITY, NAN}) xs.push_back(x);
  const Type t = T(DType::f32, {static_cast<int64_t>(xs.size())});
  // IEEE's gradual underflow (the default flushes exp(x) below 1.2e-38 to 0: below)
  host::InterpreterOptions ieee;
  ieee.flush_subnormals = false;
  Array out = host::run(unary_program(Op::exponential, t), {Array::f32(t.shape, xs)}, ieee).at(0);
  const float* y = out.data<float>();
  const Array flushed = run1(unary_program(Op::exponential, t), {Array::f32(t.shape, xs)});
  int subnormal = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const bool sub = std::fpclassify(y[i]) == FP_SUBNORMAL;
    subnormal += sub;
    const float f = flushed.data<float>()[i];
    if (std::isnan(y[i])) EXPECT_TRUE(std::isnan(f));
    else EXPECT_EQ(f, sub && host::SubnormalMode::available() ? 0.f : y[i]) << "exp(" << xs[i] << ") flushed";
  }
  EXPECT_GT(subnormal, 100);
  for (size_t i = 0; i < specials; ++i) {
    const float got = y[i], want = static_cast<float>(std::exp(static_cast<double>(xs[i])));
    int32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    EXPECT_LE(std::llabs(static_cast<int64_t>(a) - b), 2) << "exp(" << xs[i] << ") = " << got << ", want " << want;
  }
  EXPECT_EQ(y[specials], INFINITY);      // exp(89)
  EXPECT_EQ(y[specials + 1], INFINITY);  // exp(1000)
  EXPECT_EQ(y[specials + 2], INFINITY);
  EXPECT_EQ(y[specials + 3], 0.0f);      // exp(-104): below half the smallest subnormal
  EXPECT_EQ(y[specials + 4], 0.0f);
  EXPECT_EQ(y[specials + 5], 0.0f);
  EXPECT_TRUE(std::isnan(y[specials + 6]));
  EXPECT_EQ(y[0], static_cast<float>(std::exp(-104.0)));  // 0 as well
}

// ---- layout -----------------------------------------------------------------

// The numbers themselves, for one small case of each.
TEST(Layout, SlicePadConcatenateByHand) {
  Tracer tr;
  Tensor x = tr.input("x", T(DType::f32, {2, 3}));
  Tensor y = tr.input("y", T(DType::f32, {2, 1}));
  Program p = tr.finish({{"s", slice(x, {0, 1}, {2, 3})},
                         {"p", pad(y, {1, 0}, {0, 2})},
                         {"c", concatenate({x, y}, 1)},
                         {"st", slice(x, {0, 0}, {2, 3}, {1, 2})}});
  const std::vector<Array> out = host::run(p, {Array::f32({2, 3}, {1, 2, 3, 4, 5, 6}), Array::f32({2, 1}, {7, 8})});
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{2, 3, 5, 6}));
  EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{0, 0, 0, 7, 0, 0, 8, 0, 0}));
  EXPECT_EQ(out[2].to_doubles(), (std::vector<double>{1, 2, 3, 7, 4, 5, 6, 8}));
  EXPECT_EQ(out[3].to_doubles(), (std::vector<double>{1, 3, 4, 6}));
  EXPECT_EQ(out[1].type(), T(DType::f32, {3, 3}));
}

// Rotate-half as the Llama model writes it (slices, a negate, a
// concatenate, the cos/sin products) and its gradient: the slices and the
// concatenate run as steps of their own between fused groups, and fused and
// unfused runs give the same bits, in f32 and bf16.
TEST(Layout, RotateHalfFusedEqualsUnfused) {
  for (DType d : {DType::f32, DType::bf16}) {
    Tracer tr;
    Tensor x = tr.input("x", T(d, {2, 3, 5, 8}));
    Tensor cs = tr.input("cos", T(d, {5, 8}));
    Tensor sn = tr.input("sin", T(d, {5, 8}));
    Tensor x1 = slice(x, {0, 0, 0, 0}, {2, 3, 5, 4});
    Tensor x2 = slice(x, {0, 0, 0, 4}, {2, 3, 5, 8});
    Tensor r = x * cs + concatenate({-x2, x1}, -1) * sn;
    Tensor loss = sum(convert(exp(r) * r, DType::f32));
    Program g = value_and_grad(tr.finish({{"loss", loss}}), {"x"});
    const std::vector<Array> in = {random(T(d, {2, 3, 5, 8}), 21), random(T(d, {5, 8}), 22), random(T(d, {5, 8}), 23)};
    host::InterpreterOptions fused, unfused;
    unfused.fuse = false;
    host::Interpreter a(g, fused), b(g, unfused);
    EXPECT_GT(a.own_steps(Op::slice), 0);
    const std::vector<Array> ga = a.run(in), gb = b.run(in);
    for (size_t k = 0; k < ga.size(); ++k) EXPECT_TRUE(ga[k].bit_equal(gb[k])) << dtype_name(d) << " output " << k;
    // and the rotation itself, by hand: r[.., j] = x[j] cos[j] - x[j + 4] sin[j] for j < 4
    Tracer t2;
    Tensor x_ = t2.input("x", T(DType::f32, {1, 1, 1, 4}));
    Tensor h1 = slice(x_, {0, 0, 0, 0}, {1, 1, 1, 2}), h2 = slice(x_, {0, 0, 0, 2}, {1, 1, 1, 4});
    Program rp = t2.finish({{"r", concatenate({-h2, h1}, 3)}});
    EXPECT_EQ(host::run(rp, {Array::f32({1, 1, 1, 4}, {1, 2, 3, 4})})[0].to_doubles(), (std::vector<double>{-3, -4, 1, 2}));
  }
}

TEST(Layout, ReshapeOfIntermediateFeedsLaterOps) {
  // The reshape aliases the exp's buffer; the buffer must stay alive until the add.
  Program p;
  int x = p.add_input("x", T(DType::f32, {2, 6}));
  int e = p.add_eqn(Op::exponential, {x}, {});
  int r = p.add_eqn_typed(Op::reshape, {e}, {}, T(DType::f32, {3, 4}));
  int n1 = p.add_eqn(Op::negate, {r}, {});
  int n2 = p.add_eqn(Op::negate, {n1}, {});
  int n3 = p.add_eqn(Op::negate, {n2}, {});
  p.add_output("out", p.add_eqn(Op::add, {n3, r}, {}));
  Array in = random(T(DType::f32, {2, 6}), 16);
  Array out = run1(p, {in});
  ASSERT_EQ(out.type(), T(DType::f32, {3, 4}));
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(out.get(i), 0.0);
  // and with a nonzero combination, to catch a stale buffer
  Program q;
  int qx = q.add_input("x", T(DType::f32, {2, 6}));
  int qe = q.add_eqn(Op::exponential, {qx}, {});
  int qr = q.add_eqn_typed(Op::reshape, {qe}, {}, T(DType::f32, {3, 4}));
  int qn = q.add_eqn(Op::negate, {qr}, {});
  int qm = q.add_eqn(Op::multiply, {qn, qn}, {});
  q.add_output("out", q.add_eqn(Op::subtract, {qm, qr}, {}));
  Array o2 = run1(q, {in});
  for (int64_t i = 0; i < 12; ++i) {
    float v = std::exp(static_cast<float>(in.get(i)));
    EXPECT_EQ(o2.get(i), static_cast<double>((-v) * (-v) - v)) << i;
  }
}

// ---- reductions ---------------------------------------------------------------

std::vector<double> ref_reduce(const Array& in, const std::vector<int64_t>& axes, bool max, DType d) {
  Shape out_shape;
  for (int64_t a = 0; a < static_cast<int64_t>(in.shape().size()); ++a)
    if (std::find(axes.begin(), axes.end(), a) == axes.end()) out_shape.push_back(in.shape()[static_cast<size_t>(a)]);
  int64_t n = 1;
  for (int64_t s : out_shape) n *= s;
  std::vector<double> acc(static_cast<size_t>(n), max ? -INFINITY : 0.0);
  if (max && d == DType::i32) acc.assign(static_cast<size_t>(n), static_cast<double>(std::numeric_limits<int32_t>::lowest()));
  for (int64_t i = 0; i < in.numel(); ++i) {
    Shape ii = unravel(i, in.shape()), oi;
    for (int64_t a = 0; a < static_cast<int64_t>(ii.size()); ++a)
      if (std::find(axes.begin(), axes.end(), a) == axes.end()) oi.push_back(ii[static_cast<size_t>(a)]);
    double& r = acc[static_cast<size_t>(ravel(oi, out_shape))];
    double v = in.get(i);
    r = max ? (std::isnan(r) || std::isnan(v) ? NAN : std::max(r, v)) : r + v;
  }
  return acc;
}

// The order reduce_run documents, in scalar f32: a row shorter than 16 from
// its first element on; else element j into partial j % 8, the partials
// combined pairwise (l with l + 4, then l + 2, then 1).
float eight_partials_sum(const float* x, int64_t n) {
  float acc = 0.0f;
  if (n < 16) {
    for (int64_t j = 0; j < n; ++j) acc += x[j];
    return acc;
  }
  float part[8];
  for (int l = 0; l < 8; ++l) part[l] = x[l];
  for (int64_t j = 8; j < n; ++j) part[j % 8] += x[j];
  for (int w = 4; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) part[l] += part[l + w];
  return part[0];
}

// Rows of 16 and more are reduced as eight interleaved partial results
// (kernels_layout.cpp, reduce_run), tails included: every length from the
// short path's last to past two blocks of 8, and long rows; NaN anywhere in a
// row still wins the max; integer sums stay exact; f32 sums are the bits of
// that order (the vector code, its pairwise steps on halves of a vector
// included, may not reorder them).
TEST(Reduce, LongRowsInEightPartials) {
  for (int64_t len : {15, 16, 17, 23, 24, 31, 33, 100, 1000}) {
    for (DType d : {DType::f32, DType::f64, DType::i32})
      for (Op op : {Op::reduce_sum, Op::reduce_max}) {
        const Type t = T(d, {3, len});
        Program p;
        int x = p.add_input("x", t);
        Attrs at;
        at.dims = {1};
        int r = p.add_eqn(op, {x}, at);
        p.add_output("out", r);
        Array in = random(t, 19 + static_cast<uint32_t>(len), -20, 20);
        SCOPED_TRACE(std::string(dtype_name(d)) + " " + op_name(op) + " row of " + std::to_string(len));
        const Array got = run1(p, {in});
        const std::vector<double> want = ref_reduce(in, {1}, op == Op::reduce_max, d);
        if (d == DType::f32 && op == Op::reduce_sum) {
          for (int64_t i = 0; i < 3; ++i) {  // a float sum of n terms: within n eps sum|x|
            double mag = 0;
            for (int64_t j = 0; j < len; ++j) mag += std::fabs(in.get(i * len + j));
            EXPECT_NEAR(got.get(i), want[static_cast<size_t>(i)], static_cast<double>(len) * 1.2e-7 * mag) << i;
            EXPECT_EQ(got.data<float>()[i], eight_partials_sum(in.data<float>() + i * len, len)) << i;
          }
        } else {
          expect_near(got, p.type(r), want, d == DType::f64 ? 1e-12 : 0.0);
        }
      }
    // Several runs of the row length into one output: [4, 3, len] over {0, 2}.
    {
      const Type t = T(DType::f64, {4, 3, len});
      Program p;
      int x = p.add_input("x", t);
      Attrs at;
      at.dims = {0, 2};
      int r = p.add_eqn(Op::reduce_sum, {x}, at);
      p.add_output("out", r);
      Array in = random(t, 29 + static_cast<uint32_t>(len), -20, 20);
      expect_near(run1(p, {in}), p.type(r), ref_reduce(in, {0, 2}, false, DType::f64), 1e-12);
    }
    // NaN at every position of a row: the row's max is NaN, the others not.
    for (int64_t at_j : {int64_t{0}, len / 2, len - 1}) {
      Program p;
      int x = p.add_input("x", T(DType::f32, {2, len}));
      Attrs at;
      at.dims = {1};
      p.add_output("max", p.add_eqn(Op::reduce_max, {x}, at));
      Array in = random(T(DType::f32, {2, len}), 5);
      in.set(at_j, NAN);
      const Array out = run1(p, {in});
      EXPECT_TRUE(std::isnan(out.get(0))) << "NaN at " << at_j << " of " << len;
      EXPECT_FALSE(std::isnan(out.get(1)));
    }
  }
}

// ---- dot_general --------------------------------------------------------------

// dot_general from its definition, in double: out[batch, lhs free, rhs free] =
// sum over contracting indices of lhs * rhs.
std::vector<double> ref_dot(const Array& l, const Array& r, const Attrs& a, Shape* out_shape) {
  auto free_of = [](int rank, const std::vector<int64_t>& b, const std::vector<int64_t>& c) {
    std::vector<int64_t> f;
    for (int64_t d = 0; d < rank; ++d)
      if (std::find(b.begin(), b.end(), d) == b.end() && std::find(c.begin(), c.end(), d) == c.end()) f.push_back(d);
    return f;
  };
  const Shape& ls = l.shape();
  const Shape& rs = r.shape();
  std::vector<int64_t> lf = free_of(static_cast<int>(ls.size()), a.lhs_batch, a.lhs_contract);
  std::vector<int64_t> rf = free_of(static_cast<int>(rs.size()), a.rhs_batch, a.rhs_contract);
  Shape os, cs;
  for (int64_t d : a.lhs_batch) os.push_back(ls[static_cast<size_t>(d)]);
  for (int64_t d : lf) os.push_back(ls[static_cast<size_t>(d)]);
  for (int64_t d : rf) os.push_back(rs[static_cast<size_t>(d)]);
  for (int64_t d : a.lhs_contract) cs.push_back(ls[static_cast<size_t>(d)]);
  *out_shape = os;
  int64_t n = 1, nc = 1;
  for (int64_t s : os) n *= s;
  for (int64_t s : cs) nc *= s;
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  for (int64_t o = 0; o < n; ++o) {
    Shape oi = unravel(o, os);
    Shape li(ls.size()), ri(rs.size());
    size_t k = 0;
    for (size_t b = 0; b < a.lhs_batch.size(); ++b, ++k) {
      li[static_cast<size_t>(a.lhs_batch[b])] = oi[k];
      ri[static_cast<size_t>(a.rhs_batch[b])] = oi[k];
    }
    for (int64_t d : lf) li[static_cast<size_t>(d)] = oi[k++];
    for (int64_t d : rf) ri[static_cast<size_t>(d)] = oi[k++];
    double sum = 0.0;
    for (int64_t c = 0; c < nc; ++c) {
      Shape ci = unravel(c, cs);
      for (size_t j = 0; j < cs.size(); ++j) {
        li[static_cast<size_t>(a.lhs_contract[j])] = ci[j];
        ri[static_cast<size_t>(a.rhs_contract[j])] = ci[j];
      }
      sum += l.get(ravel(li, ls)) * r.get(ravel(ri, rs));
    }
    out[static_cast<size_t>(o)] = sum;
  }
  return out;
}

// dot_general's dimension numbers.
Attrs dot_dims(std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc, std::vector<int64_t> rc) {
  Attrs at;
  at.lhs_batch = std::move(lb);
  at.rhs_batch = std::move(rb);
  at.lhs_contract = std::move(lc);
  at.rhs_contract = std::move(rc);
  return at;
}

struct DotCase {
  const char* name;
  Shape lhs, rhs;
  std::vector<int64_t> lb, rb, lc, rc;
  bool packs = false;  // an operand cannot go to BLAS in place: copied to scratch first
  bool bt = false;     // B transposed: copied transposed for libxsmm (f32, when built with it)
};

void PrintTo(const DotCase& c, std::ostream* os) { *os << c.name; }

class DotGeneral : public ::testing::TestWithParam<DotCase> {};

TEST_P(DotGeneral, MatchesDefinition) {
  const DotCase& c = GetParam();
  for (DType d : {DType::f32, DType::f64}) {
    Program p;
    int l = p.add_input("lhs", T(d, c.lhs)), r = p.add_input("rhs", T(d, c.rhs));
    const Attrs at = dot_dims(c.lb, c.rb, c.lc, c.rc);
    int o = p.add_eqn(Op::dot_general, {l, r}, at);
    p.add_output("out", o);
    Array lv = random(T(d, c.lhs), 21), rv = random(T(d, c.rhs), 22);
    Shape want_shape;
    std::vector<double> want = ref_dot(lv, rv, at, &want_shape);
    ASSERT_EQ(p.type(o).shape, want_shape);
    SCOPED_TRACE(dtype_name(d));
    host::Interpreter it(p);
    expect_near(it.run({lv, rv})[0], T(d, want_shape), want, d == DType::f32 ? 1e-5 : 1e-12);
    // The result goes straight to the output Array, so the arena holds only
    // packing scratch: none when BLAS reads both operands in place (and
    // libxsmm, which has no kernel for a transposed B, is not given one).
    const bool bt_copy = c.bt && d == DType::f32 && !host::gemm_info().xsmm_isa.empty();
    EXPECT_EQ(it.arena_bytes() > 0, c.packs || bt_copy);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DotGeneral,
    ::testing::Values(
        DotCase{"matmul", {4, 5}, {5, 3}, {}, {}, {1}, {0}},
        DotCase{"lhs_transposed", {5, 4}, {5, 3}, {}, {}, {0}, {0}},
        DotCase{"rhs_transposed", {4, 5}, {3, 5}, {}, {}, {1}, {1}, false, true},
        DotCase{"both_transposed", {5, 4}, {3, 5}, {}, {}, {0}, {1}, false, true},
        DotCase{"batched", {2, 4, 5}, {2, 5, 3}, {0}, {0}, {2}, {1}},
        DotCase{"batch_not_leading", {4, 2, 5}, {5, 3, 2}, {1}, {2}, {2}, {0}, true},  // rhs: no unit stride
        DotCase{"attention_scores", {2, 3, 4, 8}, {2, 3, 6, 8}, {0, 1}, {0, 1}, {3}, {3}, false, true},
        DotCase{"attention_values", {2, 3, 4, 6}, {2, 3, 6, 8}, {0, 1}, {0, 1}, {3}, {2}},
        DotCase{"two_contracting_dims_chained", {3, 4, 5}, {4, 5, 2}, {}, {}, {1, 2}, {0, 1}},
        DotCase{"two_contracting_dims_swapped", {2, 3, 4}, {4, 5, 2}, {}, {}, {0, 2}, {2, 0}, true},
        DotCase{"free_dims_split", {3, 4, 5}, {4, 6}, {}, {}, {1}, {0}, true},  // M = 3*5 is not one run
        DotCase{"outer_product", {3}, {4}, {}, {}, {}, {}},
        DotCase{"vector_dot", {7}, {7}, {}, {}, {0}, {0}},
        DotCase{"matrix_vector", {4, 7}, {7}, {}, {}, {1}, {0}},
        DotCase{"vector_matrix_lhs_contract0", {7}, {7, 3}, {}, {}, {0}, {0}},
        DotCase{"batch_only", {3, 4}, {3, 4}, {0, 1}, {0, 1}, {}, {}},
        DotCase{"size_one_axes", {1, 4, 1, 5}, {5, 1, 3}, {}, {}, {3}, {0}},
        DotCase{"empty_contraction", {3, 0}, {0, 2}, {}, {}, {1}, {0}}),
    [](const ::testing::TestParamInfo<DotCase>& i) { return std::string(i.param.name); });

// A transpose that only dot_generals read runs no step: the dots read its
// operand through the permuted strides (the attention heads' q, k, v). Checked
// against the definition on the materialised transpose, and where the free
// axes would come out in another order, the transpose still runs.
TEST(DotGeneralFolding, ReadsTransposedOperandsInPlace) {
  struct C {
    const char* name;
    Shape x;                     // the transposed value's operand
    std::vector<int64_t> perm;
    bool lhs;                    // the transpose is the lhs (else the rhs)
    Shape other;
    std::vector<int64_t> lb, rb, lc, rc;
    bool folds;
  };
  const C cases[] = {
      {"heads_lhs", {2, 5, 3, 8}, {0, 2, 1, 3}, true, {2, 3, 6, 8}, {0, 1}, {0, 1}, {3}, {3}, true},
      {"heads_rhs", {2, 6, 3, 8}, {0, 2, 1, 3}, false, {2, 3, 5, 8}, {0, 1}, {0, 1}, {3}, {3}, true},
      {"values_rhs", {2, 6, 3, 8}, {0, 2, 1, 3}, false, {2, 3, 5, 6}, {0, 1}, {0, 1}, {3}, {2}, true},
      {"matrix", {5, 7}, {1, 0}, true, {5, 3}, {}, {}, {1}, {0}, true},
      {"free_axes_reversed", {3, 4, 5}, {2, 0, 1}, true, {4, 6}, {}, {}, {2}, {0}, false},
      // read from x, the free axes (0, 1, 3) would not form one run: the dot
      // would copy x anyway, so the transpose stays (one copy for all readers)
      {"operand_not_in_place", {2, 3, 4, 5}, {0, 1, 3, 2}, true, {4, 6}, {}, {}, {3}, {0}, false},
  };
  for (const C& c : cases) {
    SCOPED_TRACE(c.name);
    for (DType d : {DType::f32, DType::f64}) {
      Program p;
      const int x0 = p.add_input("x", T(d, c.x)), y = p.add_input("y", T(d, c.other));
      // x an intermediate in the arena (the seed's q, k, v are), not an input
      const int x = p.add_eqn(Op::negate, {p.add_eqn(Op::negate, {x0}, {})}, {});
      Attrs ta;
      ta.dims = c.perm;
      const int t = p.add_eqn(Op::transpose, {x}, ta);
      const Attrs at = dot_dims(c.lb, c.rb, c.lc, c.rc);
      p.add_output("out", c.lhs ? p.add_eqn(Op::dot_general, {t, y}, at) : p.add_eqn(Op::dot_general, {y, t}, at));
      Program q = p;  // the transpose itself as an output too: it must run
      q.add_output("t", t);
      const Array xv = random(T(d, c.x), 31), yv = random(T(d, c.other), 32);
      host::Interpreter it(p), keep(q);
      EXPECT_EQ(it.own_steps(Op::transpose), c.folds ? 0 : 1);
      EXPECT_EQ(keep.own_steps(Op::transpose), 1);
      const std::vector<Array> with_t = keep.run({xv, yv});
      Shape want_shape;
      const std::vector<double> want =
          c.lhs ? ref_dot(with_t[1], yv, at, &want_shape) : ref_dot(yv, with_t[1], at, &want_shape);
      expect_near(it.run({xv, yv})[0], T(d, want_shape), want, d == DType::f32 ? 1e-5 : 1e-12);
      expect_near(with_t[0], T(d, want_shape), want, d == DType::f32 ? 1e-5 : 1e-12);
    }
  }
  // Both operands one transpose: t t^T.
  Program p;
  const int x = p.add_input("x", T(DType::f64, {4, 6}));
  Attrs ta;
  ta.dims = {1, 0};
  const int t = p.add_eqn(Op::transpose, {x}, ta);
  Attrs at;
  at.lhs_contract = {1};
  at.rhs_contract = {1};
  p.add_output("out", p.add_eqn(Op::dot_general, {t, t}, at));
  host::Interpreter it(p);
  EXPECT_EQ(it.own_steps(Op::transpose), 0);
  const Array xv = random(T(DType::f64, {4, 6}), 33);
  const Array got = it.run({xv})[0];
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 6; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < 4; ++k) sum += xv.get(k * 6 + i) * xv.get(k * 6 + j);
      EXPECT_NEAR(got.get(i * 6 + j), sum, 1e-12) << i << "," << j;
    }
}

// A transpose that is the one reader of a dot_general's result runs no step:
// the dot writes its result in the transpose's layout (the attention output,
// back to token-major). Checked against the definition, with the transpose
// read by a negate so that it is no program output; where the dot's result
// has another reader, or the transpose moves N's axis off stride 1, the
// transpose runs. (Fused, the transpose and the negate are one loop group,
// and the fused runs are the unfused bits: HostFusion.)
TEST(DotGeneralFolding, WritesResultsThroughATransposeThatReadsThem) {
  struct C {
    const char* name;
    Shape l, r;
    std::vector<int64_t> lb, rb, lc, rc, perm;
    bool second_reader;
    bool folds;
  };
  const C cases[] = {
      {"heads_back", {2, 3, 5, 6}, {2, 3, 6, 8}, {0, 1}, {0, 1}, {3}, {2}, {0, 2, 1, 3}, false, true},
      {"batch_moved_inside", {4, 5, 6}, {4, 6, 3}, {0}, {0}, {2}, {1}, {1, 0, 2}, false, true},
      // 8 matrices of 64 x 40 in 4 parts (batch split), written interleaved
      // (c_off per matrix, ldc = 4 * 40): B untransposed, and B transposed
      // (copied transposed first: pack_bt's batch path)
      {"heads_back_in_parts", {2, 4, 64, 32}, {2, 4, 32, 40}, {0, 1}, {0, 1}, {3}, {2}, {0, 2, 1, 3}, false, true},
      {"heads_back_in_parts_bt", {2, 4, 64, 32}, {2, 4, 40, 32}, {0, 1}, {0, 1}, {3}, {3}, {0, 2, 1, 3}, false, true},
      {"n_off_stride_one", {5, 6}, {6, 3}, {}, {}, {1}, {0}, {1, 0}, false, false},
      {"result_read_twice", {2, 3, 5, 6}, {2, 3, 6, 8}, {0, 1}, {0, 1}, {3}, {2}, {0, 2, 1, 3}, true, false},
  };
  for (const C& c : cases) {
    SCOPED_TRACE(c.name);
    for (DType d : {DType::f32, DType::f64}) {
      Program p;
      const int l = p.add_input("l", T(d, c.l)), r = p.add_input("r", T(d, c.r));
      const Attrs at = dot_dims(c.lb, c.rb, c.lc, c.rc);
      const int x = p.add_eqn(Op::dot_general, {l, r}, at);
      Attrs ta;
      ta.dims = c.perm;
      const int t = p.add_eqn(Op::transpose, {x}, ta);
      p.add_output("neg", p.add_eqn(Op::negate, {t}, {}));
      if (c.second_reader) p.add_output("x2", p.add_eqn(Op::add, {x, x}, {}));
      const Array lv = random(T(d, c.l), 41), rv = random(T(d, c.r), 42);
      // Unfused, so that the transpose is not a member of the negate's loop group.
      host::InterpreterOptions unfused;
      unfused.fuse = false;
      host::Interpreter it(p, unfused);
      EXPECT_EQ(it.own_steps(Op::transpose), c.folds ? 0 : 1);
      Shape xs;
      const std::vector<double> xw = ref_dot(lv, rv, at, &xs);
      // want[i] = -x[perm-index]: the transpose of the definition, negated.
      Shape ts;
      for (int64_t a : c.perm) ts.push_back(xs[static_cast<size_t>(a)]);
      std::vector<double> want(xw.size());
      for (int64_t i = 0; i < static_cast<int64_t>(want.size()); ++i) {
        const Shape ti = unravel(i, ts);
        Shape xi(xs.size());
        for (size_t k = 0; k < c.perm.size(); ++k) xi[static_cast<size_t>(c.perm[k])] = ti[k];
        want[static_cast<size_t>(i)] = -xw[static_cast<size_t>(ravel(xi, xs))];
      }
      const std::vector<Array> got = it.run({lv, rv});
      expect_near(got[0], T(d, ts), want, d == DType::f32 ? 1e-5 : 1e-12);
      if (c.second_reader) {
        std::vector<double> twice(xw);
        for (double& v : twice) v *= 2;
        expect_near(got[1], T(d, xs), twice, d == DType::f32 ? 1e-5 : 1e-12);
      }
    }
  }
}

// The folding's edges: bf16 operands (the dot widens them while copying, so
// a transpose is folded whatever its layout), an empty contraction (its
// result is zeros written whole: no transposed writing), and a copied lhs
// beside a B copied transposed for libxsmm.
TEST(DotGeneralFolding, Bf16EmptySumsAndCopiedOperands) {
  host::InterpreterOptions unfused;
  unfused.fuse = false;
  {  // bf16 q k^T through a transposed k: f32 result, against the definition
    Program p;
    const int q = p.add_input("q", T(DType::bf16, {2, 5, 8})), k0 = p.add_input("k", T(DType::bf16, {5, 2, 8}));
    Attrs ta;
    ta.dims = {1, 0, 2};
    const int k = p.add_eqn(Op::transpose, {k0}, ta);  // [2, 5, 8]
    const Attrs at = dot_dims({0}, {0}, {2}, {2});
    p.add_output("s", p.add_eqn(Op::dot_general, {q, k}, at));
    host::Interpreter it(p, unfused);
    EXPECT_EQ(it.own_steps(Op::transpose), 0);
    const Array qv = random(T(DType::f32, {2, 5, 8}), 51).converted(DType::bf16);
    const Array kv = random(T(DType::f32, {5, 2, 8}), 52).converted(DType::bf16);
    const Array got = it.run({qv, kv})[0];
    ASSERT_EQ(got.type(), T(DType::f32, {2, 5, 5}));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          double sum = 0;  // products of bf16 values are exact in f32; the sum rounds
          for (int64_t c = 0; c < 8; ++c) sum += qv.get((b * 5 + i) * 8 + c) * kv.get((j * 2 + b) * 8 + c);
          EXPECT_NEAR(got.get((b * 5 + i) * 5 + j), sum, 1e-5 * (1 + std::fabs(sum))) << b << "," << i << "," << j;
        }
  }
  {  // an empty sum, read through a transpose: zeros, the transpose kept
    Program p;
    const int l = p.add_input("l", T(DType::f32, {2, 0})), r = p.add_input("r", T(DType::f32, {0, 3}));
    const int x = p.add_eqn(Op::dot_general, {l, r}, dot_dims({}, {}, {1}, {0}));
    Attrs ta;
    ta.dims = {1, 0};
    p.add_output("neg", p.add_eqn(Op::negate, {p.add_eqn(Op::transpose, {x}, ta)}, {}));
    host::Interpreter it(p, unfused);
    EXPECT_EQ(it.own_steps(Op::transpose), 1);
    expect_exact(it.run({Array(T(DType::f32, {2, 0})), Array(T(DType::f32, {0, 3}))})[0], T(DType::f32, {3, 2}),
                 {0, 0, 0, 0, 0, 0});
  }
  {  // lhs copied (its free axes split), rhs transposed (copied for libxsmm)
    Program p;
    const int l = p.add_input("l", T(DType::f32, {3, 4, 5})), r = p.add_input("r", T(DType::f32, {6, 4}));
    const Attrs at = dot_dims({}, {}, {1}, {1});  // free (3, 5) split by the contraction
    p.add_output("o", p.add_eqn(Op::dot_general, {l, r}, at));
    const Array lv = random(T(DType::f32, {3, 4, 5}), 53), rv = random(T(DType::f32, {6, 4}), 54);
    Shape ws;
    const std::vector<double> want = ref_dot(lv, rv, at, &ws);
    expect_near(host::Interpreter(p).run({lv, rv})[0], T(DType::f32, ws), want, 1e-5);
  }
}

// ---- gather / scatter ----------------------------------------------------------

TEST(Rows, OutOfRangeIndexIsAnErrorNamingValueAndPosition) {
  Program g;
  int tb = g.add_input("table", T(DType::f32, {4, 2})), ix = g.add_input("idx", T(DType::i32, {2, 3}));
  g.add_output("out", g.add_eqn(Op::gather_rows, {tb, ix}, {}));
  Array table = random(T(DType::f32, {4, 2}), 26);
  expect_error([&] { host::run(g, {table, Array::i32({2, 3}, {0, 1, 2, 3, 7, 0})}); },
               {"gather_rows", "index 7", "position 4 [1,1]", "[0, 4)"});
  expect_error([&] { host::run(g, {table, Array::i32({2, 3}, {-1, 1, 2, 3, 0, 0})}); },
               {"index -1", "position 0 [0,0]"});
  expect_error([&] { host::run(g, {table, Array::i32({2, 3}, {0, 1, 2, 3, 0, 4})}); },
               {"index 4", "position 5 [1,2]"});

  Program s;
  int o = s.add_input("operand", T(DType::f32, {3, 2})), si = s.add_input("idx", T(DType::i32, {2})),
      u = s.add_input("upd", T(DType::f32, {2, 2}));
  s.add_output("out", s.add_eqn(Op::scatter_add_rows, {o, si, u}, {}));
  expect_error([&] {
    host::run(s, {random(T(DType::f32, {3, 2}), 27), Array::i32({2}, {2, 3}), random(T(DType::f32, {2, 2}), 28)});
  }, {"scatter_add_rows", "index 3", "position 1 [1]", "[0, 3)"});
}

// ---- input checks -------------------------------------------------------------

TEST(Inputs, WrongShapeDtypeOrCountNamesTheInput) {
  Program p;
  int x = p.add_input("x", T(DType::f32, {4, 8}));
  int y = p.add_input("y", T(DType::i32, {3}));
  p.add_output("x2", p.add_eqn(Op::negate, {x}, {}));
  p.add_output("y2", p.add_eqn(Op::negate, {y}, {}));
  host::Interpreter it(p);
  Array good_x(T(DType::f32, {4, 8})), good_y(T(DType::i32, {3}));
  expect_error([&] { it.run({Array(T(DType::f32, {4, 9})), good_y}); }, {"input \"x\": expected f32[4,8], got f32[4,9]"});
  expect_error([&] { it.run({good_x, Array(T(DType::f32, {3}))}); }, {"input \"y\": expected i32[3], got f32[3]"});
  expect_error([&] { it.run({good_x}); }, {"expected 2 inputs (x, y), got 1"});
  std::vector<Array> outs;
  expect_error([&] { it.run({&good_x, nullptr}, outs); }, {"input \"y\"", "null"});
  EXPECT_EQ(it.run({good_x, good_y}).size(), 2u);
}

// ---- memory plan --------------------------------------------------------------

TEST(MemoryPlan, ChainReusesBuffers) {
  // Twenty unary ops in a chain: only two intermediates are ever live at once.
  const Type t = T(DType::f32, {256});
  Program p;
  int v = p.add_input("x", t);
  for (int i = 0; i < 20; ++i) v = p.add_eqn(i % 2 ? Op::negate : Op::tanh, {v}, {});
  p.add_output("out", v);
  host::Interpreter it(p);
  // Each op runs in place on one buffer, and that buffer is the output: it is
  // the caller's output Array, so the arena holds nothing.
  EXPECT_EQ(it.arena_bytes(), 0u);
  Array x = random(t, 29);
  Array out = it.run({x})[0];
  for (int64_t j = 0; j < 256; ++j) {
    float w = static_cast<float>(x.get(j));
    for (int i = 0; i < 20; ++i) w = i % 2 ? -w : std::tanh(w);
    EXPECT_NEAR(out.get(j), w, 1e-6);
  }
}

TEST(MemoryPlan, InPlaceOnlyWhereTheOperandIsDead) {
  // a = exp(x); b = a * a (a dead after: b may take a's bytes); c = b + a?
  // no: here a is read again by c, so b must not overwrite it.
  const Type t = T(DType::f32, {8});
  Program p;
  int x = p.add_input("x", t);
  int a = p.add_eqn(Op::exponential, {x}, {});
  int b = p.add_eqn(Op::multiply, {a, a}, {});
  int c = p.add_eqn(Op::add, {b, a}, {});
  int pred = p.add_eqn(Op::compare, {c, b}, Attrs{{}, 0, Cmp::GT, {}, {}, {}, {}, {}});
  int sel = p.add_eqn(Op::select, {pred, c, x}, {});  // c dead after: in place into c
  int r = p.add_eqn_typed(Op::reshape, {sel}, {}, T(DType::f32, {2, 4}));
  int n = p.add_eqn(Op::negate, {r}, {});  // through the reshape alias, in place again
  p.add_output("n", n);
  p.add_output("b", b);
  Array xv = random(t, 34);
  std::vector<Array> out = host::run(p, {xv});
  for (int64_t i = 0; i < 8; ++i) {
    // the host's f32 exp (scalar_math.h; within 2 ulp of libm's, checked above), so the bits compare
    float av = scalar::exponential(static_cast<float>(xv.get(i))), bv = av * av, cv = bv + av;
    float sv = cv > bv ? cv : static_cast<float>(xv.get(i));
    EXPECT_EQ(out[0].get(i), static_cast<double>(-sv)) << i;
    EXPECT_EQ(out[1].get(i), static_cast<double>(bv)) << i;
  }
}

TEST(MemoryPlan, OutputsAndLongLivedValuesAreNotOverwritten) {
  // `early` is an output computed first; `keep` is read again at the end. A plan
  // that reused either buffer too soon would change them.
  const Type t = T(DType::f64, {64});
  Program p;
  int x = p.add_input("x", t);
  int early = p.add_eqn(Op::exponential, {x}, {});
  int keep = p.add_eqn(Op::negate, {x}, {});
  int v = early;
  for (int i = 0; i < 6; ++i) v = p.add_eqn(Op::multiply, {v, v}, {});
  int last = p.add_eqn(Op::add, {v, keep}, {});
  p.add_output("early", early);
  p.add_output("last", last);
  p.add_output("x_again", x);   // an input passed straight through
  Attrs c;
  c.literal = {2.5};
  p.add_output("const", p.add_eqn_typed(Op::constant, {}, c, t));
  Array xv = random(t, 30, -0.1, 0.1);
  host::Interpreter it(p);
  std::vector<Array> out = it.run({xv});
  for (int64_t j = 0; j < 64; ++j) {
    double e = std::exp(xv.get(j)), w = e;
    for (int i = 0; i < 6; ++i) w = w * w;
    EXPECT_EQ(out[0].get(j), e);
    EXPECT_EQ(out[1].get(j), w + -xv.get(j));
    EXPECT_EQ(out[2].get(j), xv.get(j));
    EXPECT_EQ(out[3].get(j), 2.5);
  }
}

// A small two-layer network with everything a training step uses: gather,
// broadcast, dot_general in place and packed, reductions, softmax pieces.
Program mlp_program() {
  Program p;
  const DType f = DType::f32;
  int emb = p.add_input("emb", T(f, {10, 8}));
  int tok = p.add_input("tok", T(DType::i32, {2, 3}));
  int w1 = p.add_input("w1", T(f, {8, 16}));
  int w2 = p.add_input("w2", T(f, {10, 16}));  // used transposed
  int h0 = p.add_eqn(Op::gather_rows, {emb, tok}, {});                      // [2,3,8]
  Attrs d1;
  d1.lhs_contract = {2};
  d1.rhs_contract = {0};
  int h1 = p.add_eqn(Op::dot_general, {h0, w1}, d1);                         // [2,3,16]
  int th = p.add_eqn(Op::tanh, {h1}, {});
  Attrs tr;
  tr.dims = {1, 0, 2};
  int tt = p.add_eqn(Op::transpose, {th}, tr);                               // [3,2,16]
  Attrs d2;
  d2.lhs_contract = {2};
  d2.rhs_contract = {1};
  int logits = p.add_eqn(Op::dot_general, {tt, w2}, d2);                     // [3,2,10]
  Attrs last;
  last.dims = {2};
  int mx = p.add_eqn(Op::reduce_max, {logits}, last);                       // [3,2]
  Attrs bd;
  bd.dims = {0, 1};
  int mxb = p.add_eqn_typed(Op::broadcast_in_dim, {mx}, bd, T(f, {3, 2, 10}));
  int sh = p.add_eqn(Op::subtract, {logits, mxb}, {});
  int ex = p.add_eqn(Op::exponential, {sh}, {});
  int se = p.add_eqn(Op::reduce_sum, {ex}, last);
  int lse = p.add_eqn(Op::log, {se}, {});
  Attrs all;
  all.dims = {0, 1};
  int loss = p.add_eqn(Op::reduce_sum, {lse}, all);
  // the gradient of the embedding through scatter_add_rows, and a packed dot
  Attrs d3;
  d3.lhs_contract = {1, 0};  // in reverse axis order: not one strided run, so packed
  d3.rhs_contract = {1, 0};
  int g = p.add_eqn(Op::dot_general, {ex, tt}, d3);                          // [10,16]: contract 3,2 vs 2,3
  Attrs zero;
  zero.literal = {0.0};
  int z = p.add_eqn_typed(Op::constant, {}, zero, T(f, {10, 8}));
  int upd = p.add_eqn(Op::negate, {h0}, {});
  int ge = p.add_eqn(Op::scatter_add_rows, {z, tok, upd}, {});
  p.add_output("loss", loss);
  p.add_output("g", g);
  p.add_output("gemb", ge);
  return p;
}

TEST(Run, SteadyStateRunAllocatesNothing) {
  Program p = mlp_program();
  host::Interpreter it(p);
  Array emb = random(p.input_type(0), 31), tok = Array::i32({2, 3}, {1, 9, 0, 4, 4, 7});
  Array w1 = random(p.input_type(2), 32), w2 = random(p.input_type(3), 33);
  std::vector<const Array*> in = {&emb, &tok, &w1, &w2};
  std::vector<Array> out;
  it.run(in, out);  // first run: sizes the outputs
  std::vector<Array> first = out;
  g_allocations = 0;
  g_counting = true;
  it.run(in, out);
  it.run(in, out);
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0) << "heap allocations during steady-state runs";
  for (size_t j = 0; j < out.size(); ++j) EXPECT_TRUE(out[j].bit_equal(first[j])) << "output " << j;

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // C allocations (OpenBLAS's, say) are counted too.
  g_allocations = 0;
  g_counting = true;
  void* volatile raw = std::malloc(32);
  g_counting = false;
  std::free(raw);
  EXPECT_EQ(g_allocations.load(), 1);
#endif
  // The counter works: an allocation while counting is seen.
  g_allocations = 0;
  g_counting = true;
  std::vector<Array> fresh;
  it.run(in, fresh);
  g_counting = false;
  EXPECT_GT(g_allocations.load(), 0);
}

TEST(Run, MlpMatchesLoops) {
  Program p = mlp_program();
  Array emb = random(p.input_type(0), 31), tok = Array::i32({2, 3}, {1, 9, 0, 4, 4, 7});
  Array w1 = random(p.input_type(2), 32), w2 = random(p.input_type(3), 33);
  std::vector<Array> out = host::run(p, {emb, tok, w1, w2});
  // In double with plain loops.
  double th[2][3][16], ex[3][2][10], loss = 0;
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 3; ++s)
      for (int j = 0; j < 16; ++j) {
        double acc = 0;
        for (int k = 0; k < 8; ++k) acc += emb.get(static_cast<int64_t>(tok.get(b * 3 + s)) * 8 + k) * w1.get(k * 16 + j);
        th[b][s][j] = std::tanh(acc);
      }
  for (int s = 0; s < 3; ++s)
    for (int b = 0; b < 2; ++b) {
      double lg[10], m = -INFINITY, se = 0;
      for (int v = 0; v < 10; ++v) {
        lg[v] = 0;
        for (int j = 0; j < 16; ++j) lg[v] += th[b][s][j] * w2.get(v * 16 + j);
        m = std::max(m, lg[v]);
      }
      for (int v = 0; v < 10; ++v) se += ex[s][b][v] = std::exp(lg[v] - m);
      loss += std::log(se);
    }
  EXPECT_NEAR(out[0].get(0), loss, 1e-4);
  for (int v = 0; v < 10; ++v)
    for (int j = 0; j < 16; ++j) {
      double g = 0;
      for (int s = 0; s < 3; ++s)
        for (int b = 0; b < 2; ++b) g += ex[s][b][v] * th[b][s][j];
      EXPECT_NEAR(out[1].get(v * 16 + j), g, 1e-4);
    }
  std::vector<double> gemb(80, 0.0);
  for (int i = 0; i < 6; ++i)
    for (int k = 0; k < 8; ++k) gemb[static_cast<size_t>(tok.get(i)) * 8 + k] -= emb.get(static_cast<int64_t>(tok.get(i)) * 8 + k);
  expect_near(out[2], T(DType::f32, {10, 8}), gemb, 1e-6);
}

TEST(Run, OutputsAreRetypedAndMovedInterpreterStillRuns) {
  Program p;
  int x = p.add_input("x", T(DType::f32, {3}));
  p.add_output("y", p.add_eqn(Op::negate, {x}, {}));
  host::Interpreter a(p);
  host::Interpreter b(std::move(a));
  Array xv = Array::f32({3}, {1, -2, 3});
  std::vector<Array> out(3);  // wrong count and types: fixed up
  out[0] = Array(T(DType::i32, {7}));
  b.run({&xv}, out);
  ASSERT_EQ(out.size(), 1u);
  expect_exact(out[0], T(DType::f32, {3}), {-1, 2, -3});
  EXPECT_EQ(b.program().inputs[0].name, "x");
}

TEST(Run, OutputArraysMayBeTheInputArrays) {
  // An in-place update: out "x2" (computed) goes into the Array that is input
  // "x", and out "x_same" passes "x" through. The pass-through must see x as given.
  Program p;
  int x = p.add_input("x", T(DType::f32, {4}));
  p.add_output("x2", p.add_eqn(Op::add, {x, x}, {}));
  p.add_output("x_same", x);
  host::Interpreter it(p);
  std::vector<Array> arrays(2);
  arrays[0] = Array::f32({4}, {1, 2, 3, 4});
  it.run({&arrays[0]}, arrays);
  expect_exact(arrays[0], T(DType::f32, {4}), {2, 4, 6, 8});
  expect_exact(arrays[1], T(DType::f32, {4}), {1, 2, 3, 4});
}

TEST(Run, PassThroughOutputsIntoInputArraysSwapAndStayPut) {
  // Outputs (b, a, a+b, a) of inputs (a, b), run in place: output Arrays 0 and
  // 1 are the input Arrays a and b. Each pass-through must read its input as
  // given (both became b when they were copied one after the other), and the
  // one whose Array is its own input has nothing to copy (a memcpy onto itself
  // is undefined behaviour).
  Program p;
  int a = p.add_input("a", T(DType::f32, {3}));
  int b = p.add_input("b", T(DType::f32, {3}));
  p.add_output("a'", b);
  p.add_output("b'", a);
  p.add_output("sum", p.add_eqn(Op::add, {a, b}, {}));
  p.add_output("a_again", a);
  host::Interpreter it(p);
  std::vector<Array> arrays(4);
  arrays[0] = Array::f32({3}, {1, 2, 3});
  arrays[1] = Array::f32({3}, {10, 20, 30});
  for (int k = 0; k < 2; ++k) {  // swaps back and forth; the second run reuses the staging
    const std::vector<double> av = arrays[0].to_doubles(), bv = arrays[1].to_doubles();
    it.run({&arrays[0], &arrays[1]}, arrays);
    expect_exact(arrays[0], T(DType::f32, {3}), bv);
    expect_exact(arrays[1], T(DType::f32, {3}), av);
    expect_exact(arrays[2], T(DType::f32, {3}), {11, 22, 33});
    expect_exact(arrays[3], T(DType::f32, {3}), av);
  }
  // An input passed through into its own Array.
  Program q;
  q.add_output("x", q.add_input("x", T(DType::i32, {2})));
  std::vector<Array> one{Array::i32({2}, {7, -7})};
  host::Interpreter(q).run({&one[0]}, one);
  expect_exact(one[0], T(DType::i32, {2}), {7, -7});
}

TEST(Run, InPlaceRunWithTooFewOutputArraysIsAnError) {
  // Growing the outputs vector would move the Array that input "x" points at.
  Program p;
  int x = p.add_input("x", T(DType::f32, {2}));
  p.add_output("x2", p.add_eqn(Op::add, {x, x}, {}));
  p.add_output("n", p.add_eqn(Op::negate, {x}, {}));
  host::Interpreter it(p);
  std::vector<Array> arrays{Array::f32({2}, {1, 2})};
  expect_error([&] { it.run({&arrays[0]}, arrays); }, {"input \"x\" is one of the output Arrays", "has 1 Arrays, not 2"});
  arrays.resize(2);
  it.run({&arrays[0]}, arrays);
  expect_exact(arrays[0], T(DType::f32, {2}), {2, 4});
  expect_exact(arrays[1], T(DType::f32, {2}), {-1, -2});
}

TEST(Run, OneBufferBehindSeveralOutputs) {
  // e is an output twice and, reshaped, a third time; e is also read after.
  Program p;
  int x = p.add_input("x", T(DType::f64, {2, 3}));
  int e = p.add_eqn(Op::exponential, {x}, {});
  int r = p.add_eqn_typed(Op::reshape, {e}, {}, T(DType::f64, {6}));
  int n = p.add_eqn(Op::negate, {r}, {});
  p.add_output("e", e);
  p.add_output("e_again", e);
  p.add_output("r", r);
  p.add_output("n", n);
  Array xv = random(T(DType::f64, {2, 3}), 35);
  host::Interpreter it(p);
  std::vector<Array> out;
  for (int k = 0; k < 2; ++k) {  // the second run reuses the first run's Arrays
    it.run({&xv}, out);
    for (int64_t i = 0; i < 6; ++i) {
      const double w = std::exp(xv.get(i));
      EXPECT_EQ(out[0].get(i), w);
      EXPECT_EQ(out[1].get(i), w);
      EXPECT_EQ(out[2].get(i), w);
      EXPECT_EQ(out[3].get(i), -w);
    }
    EXPECT_EQ(out[2].shape(), Shape{6});
    xv.set(0, 0.5);
  }
}

TEST(Run, ZeroSizedValuesFlowThroughEveryLayoutOp) {
  Program p;
  int x = p.add_input("x", T(DType::f32, {0, 3}));
  int idx = p.add_input("idx", T(DType::i32, {0}));
  int table = p.add_input("table", T(DType::f32, {4, 3}));
  Attrs perm;
  perm.dims = {1, 0};
  int t = p.add_eqn(Op::transpose, {x}, perm);                                  // [3,0]
  Attrs bd;
  bd.dims = {0, 2};
  int b = p.add_eqn_typed(Op::broadcast_in_dim, {x}, bd, T(DType::f32, {0, 5, 3}));
  int g = p.add_eqn(Op::gather_rows, {table, idx}, {});                        // [0,3]
  int s = p.add_eqn(Op::add, {g, x}, {});
  int sc = p.add_eqn(Op::scatter_add_rows, {table, idx, s}, {});               // = table
  Attrs d;
  d.lhs_contract = {0};
  d.rhs_contract = {0};
  int m = p.add_eqn(Op::dot_general, {x, x}, d);                                // [3,3] of zeros
  p.add_output("t", t);
  p.add_output("b", b);
  p.add_output("sc", sc);
  p.add_output("m", m);
  Array tv = random(T(DType::f32, {4, 3}), 36);
  std::vector<Array> out = host::run(p, {Array(T(DType::f32, {0, 3})), Array(T(DType::i32, {0})), tv});
  EXPECT_EQ(out[0].type(), T(DType::f32, {3, 0}));
  EXPECT_EQ(out[1].type(), T(DType::f32, {0, 5, 3}));
  EXPECT_TRUE(out[2].bit_equal(tv));
  expect_exact(out[3], T(DType::f32, {3, 3}), std::vector<double>(9, 0.0));
}

// An empty result made from a non-empty operand reads nothing, so the plan
// may make it a view of that operand whatever its bytes: a scalar broadcast
// to [0], and adamw on an empty parameter (whose scalars are broadcast to
// [0] when it is written out), fused or not.
TEST(Run, EmptyResultsOfNonEmptyOperands) {
  Program p;
  const int s = p.add_input("s", T(DType::f32, {}));
  Attrs none;
  p.add_output("b", p.add_eqn_typed(Op::broadcast_in_dim, {s}, none, T(DType::f32, {3, 0})));
  Program q;
  const Type e = T(DType::f32, {0}), sc = T(DType::f32, {});
  std::vector<int> in;
  for (const char* n : {"p", "g", "m", "v"}) in.push_back(q.add_input(n, e));
  for (const char* n : {"lr", "bc1", "bc2", "decay"}) in.push_back(q.add_input(n, sc));
  Attrs a;
  a.literal = {0.9, 0.95, 1e-8};
  q.add_output("p1", q.add_eqn(Op::adamw, in, a));
  for (bool fuse : {true, false}) {
    host::InterpreterOptions o;
    o.fuse = fuse;
    EXPECT_EQ(host::Interpreter(p, o).run({Array::scalar(2.0)})[0].type(), T(DType::f32, {3, 0}));
    std::vector<Array> args(4, Array(e));
    for (int k = 0; k < 4; ++k) args.push_back(Array::scalar(0.5));
    EXPECT_EQ(host::Interpreter(q, o).run(args)[0].type(), e);
  }
}

TEST(Reduce, IntSumWrapsInsteadOfOverflowing) {
  Program p;
  int x = p.add_input("x", T(DType::i32, {3}));
  Attrs at;
  at.dims = {0};
  p.add_output("s", p.add_eqn(Op::reduce_sum, {x}, at));
  const int32_t big = std::numeric_limits<int32_t>::max();
  Array out = run1(p, {Array::i32({3}, {big, 1, 5})});
  EXPECT_EQ(out.data<int32_t>()[0], std::numeric_limits<int32_t>::min() + 5);
}

TEST(Run, RejectsAnInvalidProgram) {
  Program p;
  int x = p.add_input("x", T(DType::f32, {3}));
  p.add_output("y", p.add_eqn(Op::negate, {x}, {}));
  p.types[1] = T(DType::f32, {4});  // the equation's recorded type no longer matches its rule
  EXPECT_THROW(host::Interpreter{p}, Error);
}

// The seed model's step, fused (the default) and unfused, and the with_adamw
// program run in place (parameters and moments updated in their own Arrays,
// as the fused host lane does): no heap allocation once the outputs exist.
TEST(Run, SeedStepAndInPlaceAdamwAllocateNothingFusedOrNot) {
  nn::LmConfig c;
  std::vector<std::string> names;
  for (const nn::ParamSpec& s : nn::lm_parameters(c)) names.push_back(s.name);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names);
  const Program step = optim::with_adamw(grad, names, optim::AdamW{});
  std::vector<Array> params = nn::init_parameters(c, 3);
  Array tokens(T(DType::i32, {c.batch, c.seq})), targets = tokens;
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.set(i, static_cast<double>((i * 5) % c.vocab));
    targets.set(i, static_cast<double>((i * 3 + 1) % c.vocab));
  }
  for (bool fuse : {true, false}) {
    host::InterpreterOptions o;
    o.fuse = fuse;
    host::Interpreter g(grad, o);
    EXPECT_EQ(g.fused_groups() > 0, fuse);
    std::vector<const Array*> in;
    for (Array& p : params) in.push_back(&p);
    in.push_back(&tokens);
    in.push_back(&targets);
    std::vector<Array> out;
    g.run(in, out);
    g_allocations = 0;
    g_counting = true;
    g.run(in, out);
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0) << "gradient step, fuse " << fuse;

    // Lane 1's step: the host backend's run with events and AdamW on the idle threads.
    {
      BackendOptions bo;
      bo.host = o;
      const std::unique_ptr<Backend> b = make_backend(BackendKind::host, grad, bo);
      for (size_t j = 0; j < params.size(); ++j) b->set_input(static_cast<int>(j), params[j]);
      b->set("tokens", tokens);
      b->set("targets", targets);
      host::HostAdamW h(optim::AdamW{});
      std::vector<Array> m, v;
      for (const Array& x : params) m.emplace_back(x.type()), v.emplace_back(x.type());
      h.step(*b, 1, optim::adamw_scalars(optim::AdamW{}, 1), m, v);
      g_allocations = 0;
      g_counting = true;
      h.step(*b, 1, optim::adamw_scalars(optim::AdamW{}, 2), m, v);
      g_counting = false;
      EXPECT_EQ(g_allocations.load(), 0) << "HostAdamW step, fuse " << fuse;
      EXPECT_TRUE(std::isfinite(b->host_output(0)->get(0)));
    }

    // with_adamw in place: outputs "loss", then <p>.new, m, v for every parameter.
    host::Interpreter a(step, o);
    std::vector<Array> state;  // params, m, v, then the loss
    for (const Array& p : params) state.push_back(p);
    for (int k = 0; k < 2; ++k)
      for (const Array& p : params) state.emplace_back(p.type());
    std::vector<Array> outs(step.outputs.size());
    std::vector<const Array*> ain;
    for (size_t j = 0; j < 3 * params.size(); ++j) ain.push_back(&outs[1 + j]);
    for (size_t j = 0; j < 3 * params.size(); ++j) outs[1 + j] = state[j];
    ain.push_back(&tokens);
    ain.push_back(&targets);
    std::vector<Array> scalars(4, Array(T(DType::f32, {})));
    const optim::AdamWScalars sc = optim::adamw_scalars(optim::AdamW{}, 1);
    scalars[0].set(0, sc.lr), scalars[1].set(0, sc.bc1), scalars[2].set(0, sc.bc2), scalars[3].set(0, sc.decay);
    for (Array& x : scalars) ain.push_back(&x);
    a.run(ain, outs);
    g_allocations = 0;
    g_counting = true;
    a.run(ain, outs);
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0) << "with_adamw in place, fuse " << fuse;
    EXPECT_TRUE(std::isfinite(outs[0].get(0)));
    // Fused, every parameter and moment is computed straight into its own
    // Array. Unfused, each parameter's decay multiply p * broadcast(decay)
    // runs in place on the broadcast's buffer, which is written (with decay)
    // before p is read: the parameters go through a copy, the moments not.
    const int n = static_cast<int>(params.size());
    EXPECT_EQ(a.outputs_in_place(), fuse ? 3 * n : 2 * n) << "fuse " << fuse;
    EXPECT_EQ(a.outputs_via_copy(), fuse ? 0 : n) << "fuse " << fuse;
  }
}

// An output whose Array is also an input's is computed in place only where
// every read of that input comes first; else it goes through the
// Interpreter's own buffer and is copied in at the end. Both give the values
// of a run into separate Arrays.
TEST(Run, OutputsInPlaceOfAnInputOnlyWhereItIsReadFirst) {
  const Type t = T(DType::f32, {6});
  for (bool fuse : {true, false}) {
    host::InterpreterOptions o;
    o.fuse = fuse;
    {  // y = x * x + x. Fused, one loop reads x[i] before it writes y[i]: in
       // place. Unfused, x * x is written into y's buffer before the add reads x.
      Program p;
      int x = p.add_input("x", t);
      int sq = p.add_eqn(Op::multiply, {x, x}, {});
      p.add_output("y", p.add_eqn(Op::add, {sq, x}, {}));
      host::Interpreter it(p, o);
      std::vector<Array> arrays{Array::f32({6}, {1, -2, 3.5, 4, -5, 6})};
      it.run({&arrays[0]}, arrays);
      expect_exact(arrays[0], t, {2, 2, 15.75, 20, 20, 42});
      EXPECT_EQ(it.outputs_in_place(), fuse ? 1 : 0) << "fuse " << fuse;
      EXPECT_EQ(it.outputs_via_copy(), fuse ? 0 : 1) << "fuse " << fuse;
    }
    {  // y = -x: one elementwise step, in place fused or not
      Program p;
      int x = p.add_input("x", t);
      p.add_output("y", p.add_eqn(Op::negate, {x}, {}));
      host::Interpreter it(p, o);
      std::vector<Array> arrays{Array::f32({6}, {1, -2, 3.5, 4, -5, 6})};
      it.run({&arrays[0]}, arrays);
      expect_exact(arrays[0], t, {-1, 2, -3.5, -4, 5, -6});
      EXPECT_EQ(it.outputs_in_place(), 1) << "fuse " << fuse;
      EXPECT_EQ(it.outputs_via_copy(), 0) << "fuse " << fuse;
    }
    {  // y = 2x into x's Array, then z = x + 1 reads x after y is written: a copy
      Program p;
      int x = p.add_input("x", t);
      Attrs one;
      one.literal = {1.0};
      p.add_output("y", p.add_eqn(Op::add, {x, x}, {}));
      p.add_output("z", p.add_eqn(Op::add, {x, p.add_eqn_typed(Op::constant, {}, one, t)}, {}));
      host::Interpreter it(p, o);
      std::vector<Array> arrays{Array::f32({6}, {1, -2, 3.5, 4, -5, 6}), Array()};
      it.run({&arrays[0]}, arrays);
      expect_exact(arrays[0], t, {2, -4, 7, 8, -10, 12});
      expect_exact(arrays[1], t, {2, -1, 4.5, 5, -4, 7});
      EXPECT_EQ(it.outputs_in_place(), 0) << "fuse " << fuse;
      EXPECT_EQ(it.outputs_via_copy(), 1) << "fuse " << fuse;
    }
    {  // y = x - sum(x)
      Program p;
      int x = p.add_input("x", t);
      Attrs a;
      a.dims = {0};
      const int s = p.add_eqn(Op::reduce_sum, {x}, a);
      Attrs b;
      b.dims = {};
      p.add_output("y", p.add_eqn(Op::subtract, {x, p.add_eqn_typed(Op::broadcast_in_dim, {s}, b, t)}, {}));
      host::Interpreter it(p, o);
      std::vector<Array> arrays{Array::f32({6}, {1, -2, 3.5, 4, -5, 6})};
      it.run({&arrays[0]}, arrays);
      expect_exact(arrays[0], t, {-6.5, -9.5, -4, -3.5, -12.5, -1.5});
      // Fused, one row group reads x (the sum, then the subtract) before it
      // writes y. Unfused, the subtract runs in place on the broadcast's
      // buffer, written before the subtract reads x.
      EXPECT_EQ(it.outputs_in_place(), fuse ? 1 : 0) << "fuse " << fuse;
      EXPECT_EQ(it.outputs_via_copy(), fuse ? 0 : 1) << "fuse " << fuse;
    }
    {  // y = -transpose(x): the transpose reads other elements than the negate writes
      const Type t23 = T(DType::f32, {2, 3});
      Program p;
      int x = p.add_input("x", t23);
      Attrs a;
      a.dims = {1, 0};
      const int tr = p.add_eqn(Op::transpose, {x}, a);
      p.add_output("y", p.add_eqn(Op::negate, {p.add_eqn_typed(Op::reshape, {tr}, {}, t23)}, {}));
      host::Interpreter it(p, o);
      std::vector<Array> arrays{Array::f32({2, 3}, {1, 2, 3, 4, 5, 6})};
      it.run({&arrays[0]}, arrays);
      expect_exact(arrays[0], t23, {-1, -4, -2, -5, -3, -6});
      EXPECT_EQ(it.outputs_in_place(), 0) << "fuse " << fuse;
      EXPECT_EQ(it.outputs_via_copy(), 1) << "fuse " << fuse;
    }
    {  // an output of another type than the Array's (x's): retyping it in place would lose x, so a copy
      Program p;
      int x = p.add_input("x", t);
      p.add_output("y", p.add_eqn(Op::negate, {p.add_eqn_typed(Op::reshape, {x}, {}, T(DType::f32, {2, 3}))}, {}));
      host::Interpreter it(p, o);
      std::vector<Array> arrays{Array::f32({6}, {1, -2, 3.5, 4, -5, 6})};
      it.run({&arrays[0]}, arrays);
      expect_exact(arrays[0], T(DType::f32, {2, 3}), {-1, 2, -3.5, -4, 5, -6});
      EXPECT_EQ(it.outputs_in_place(), 0) << "fuse " << fuse;
      EXPECT_EQ(it.outputs_via_copy(), 1) << "fuse " << fuse;
    }
  }
}

// A run that fails (a gather index out of range) leaves the Arrays it would
// have written in place as they were: indices that are a program input are
// checked before the first step; an output first written before a step that
// may still throw (here a gather of computed indices) is computed aside.
TEST(Run, AFailedRunLeavesInPlaceArraysAsTheyWere) {
  const Type t = T(DType::f32, {4});
  for (bool computed : {false, true})
    for (bool fuse : {true, false}) {
      host::InterpreterOptions o;
      o.fuse = fuse;
      Program p;
      int x = p.add_input("x", t);
      int table = p.add_input("table", T(DType::f32, {3, 2}));
      int idx = p.add_input("idx", T(DType::i32, {2}));
      p.add_output("y", p.add_eqn(Op::negate, {x}, {}));
      if (computed) {
        Attrs zero;
        zero.literal = {0};
        idx = p.add_eqn(Op::add, {idx, p.add_eqn_typed(Op::constant, {}, zero, T(DType::i32, {2}))}, {});
      }
      p.add_output("z", p.add_eqn(Op::gather_rows, {table, idx}, {}));
      host::Interpreter it(p, o);
      std::vector<Array> arrays{Array::f32({4}, {1, 2, 3, 4}), Array()};
      const Array tab = Array::f32({3, 2}, {0, 1, 2, 3, 4, 5});
      Array bad = Array::i32({2}, {0, 7}), good = Array::i32({2}, {2, 0});
      expect_error([&] { it.run({&arrays[0], &tab, &bad}, arrays); }, {"index 7 at position 1", "out of range [0, 3)"});
      expect_exact(arrays[0], t, {1, 2, 3, 4});
      it.run({&arrays[0], &tab, &good}, arrays);
      expect_exact(arrays[0], t, {-1, -2, -3, -4});
      expect_exact(arrays[1], T(DType::f32, {2, 2}), {4, 5, 0, 1});
      EXPECT_EQ(it.outputs_in_place(), computed ? 0 : 1) << "computed " << computed << ", fuse " << fuse;
      EXPECT_EQ(it.outputs_via_copy(), computed ? 1 : 0) << "computed " << computed << ", fuse " << fuse;
    }
}

// The with_adamw program's state updated in place over three steps gives the
// very bits of the same steps run into a second set of Arrays (the lanes'
// former layout), fused and unfused.
TEST(Run, InPlaceAdamwStepsGiveTheBitsOfSeparateArrays) {
  nn::LmConfig c;
  c.n_layers = 1;
  std::vector<std::string> names;
  for (const nn::ParamSpec& s : nn::lm_parameters(c)) names.push_back(s.name);
  const Program step = optim::with_adamw(value_and_grad(nn::lm_loss_program(c), names), names, optim::AdamW{});
  const std::vector<Array> params = nn::init_parameters(c, 5);
  const size_t n = params.size();
  Array tokens(T(DType::i32, {c.batch, c.seq})), targets = tokens;
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.set(i, static_cast<double>((i * 7) % c.vocab));
    targets.set(i, static_cast<double>((i * 3 + 2) % c.vocab));
  }
  for (bool fuse : {true, false}) {
    host::InterpreterOptions o;
    o.fuse = fuse;
    host::Interpreter a(step, o), b(step, o);
    std::vector<Array> inplace(step.outputs.size()), sets[2] = {std::vector<Array>(step.outputs.size()),
                                                                std::vector<Array>(step.outputs.size())};
    auto index = [&](size_t j) { return static_cast<size_t>(step.output_index(optim::updated_name(step.inputs[j].name))); };
    for (size_t j = 0; j < n; ++j)
      for (size_t k = 0; k < 3; ++k) {
        const Array init = k == 0 ? params[j] : Array(params[j].type());
        inplace[index(k * n + j)] = init;
        sets[0][index(k * n + j)] = init;
      }
    std::vector<Array> scalars(4, Array(T(DType::f32, {})));
    for (int s = 0; s < 3; ++s) {
      const optim::AdamWScalars sc = optim::adamw_scalars(optim::AdamW{}, s + 1);
      scalars[0].set(0, sc.lr), scalars[1].set(0, sc.bc1), scalars[2].set(0, sc.bc2), scalars[3].set(0, sc.decay);
      std::vector<const Array*> ia(step.inputs.size()), ib(step.inputs.size());
      for (size_t j = 0; j < 3 * n; ++j) ia[j] = &inplace[index(j)], ib[j] = &sets[s % 2][index(j)];
      for (size_t j = 3 * n; j < step.inputs.size(); ++j) {
        const std::string& nm = step.inputs[j].name;
        const Array* x = nm == "tokens" ? &tokens : nm == "targets" ? &targets : nullptr;
        for (int i = 0; i < 4; ++i)
          if (nm == optim::kScalarNames[i]) x = &scalars[static_cast<size_t>(i)];
        ASSERT_NE(x, nullptr) << nm;
        ia[j] = ib[j] = x;
      }
      a.run(ia, inplace);
      b.run(ib, sets[(s + 1) % 2]);
      EXPECT_EQ(a.outputs_in_place(), static_cast<int>(fuse ? 3 * n : 2 * n)) << "fuse " << fuse;
      EXPECT_EQ(b.outputs_in_place() + b.outputs_via_copy(), 0) << "fuse " << fuse;
      const std::vector<Array>& other = sets[(s + 1) % 2];
      for (size_t k = 0; k < inplace.size(); ++k) {
        ASSERT_EQ(inplace[k].bytes(), other[k].bytes());
        EXPECT_EQ(std::memcmp(inplace[k].raw(), other[k].raw(), inplace[k].bytes()), 0)
            << "output " << step.outputs[k].name << ", step " << s << ", fuse " << fuse;
      }
    }
  }
}

}  // namespace
