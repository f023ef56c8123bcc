// capstep::Array: construction, element access, deep copies, conversion,
// allocation reuse by reset(), and max_rel_diff.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "capstep/array.h"

using namespace capstep;
using ::testing::HasSubstr;

namespace {

Type T(DType d, Shape s) { return {d, std::move(s)}; }

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(Array, ZeroFilledAndAligned) {
  for (DType d : {DType::f32, DType::f64, DType::i32, DType::i1}) {
    Array a(T(d, {3, 5}));
    EXPECT_EQ(a.numel(), 15);
    EXPECT_EQ(a.bytes(), 15 * dtype_size(d));
    EXPECT_TRUE(aligned64(a.raw()));
    for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(a.get(i), 0.0);
  }
  Array s = Array::scalar(2.5);
  EXPECT_EQ(s.type(), T(DType::f32, {}));
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.get(0), 2.5);
  Array empty(T(DType::f32, {0, 4}));
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.bytes(), 0u);
}

TEST(Array, TypedFactoriesKeepValues) {
  Array f = Array::f32({2, 2}, {1.5f, -2.0f, 3.25f, 0.0f});
  EXPECT_EQ(f.data<float>()[2], 3.25f);
  Array d = Array::f64({3}, {0.1, 0.2, 0.3});
  EXPECT_EQ(d.data<double>()[0], 0.1);
  Array i = Array::i32({2}, {-7, 9});
  EXPECT_EQ(i.data<int32_t>()[0], -7);
  EXPECT_EQ(i.get(1), 9.0);
  EXPECT_THROW(Array::f32({2, 2}, {1, 2, 3}), Error);
  try {
    Array::i32({3}, {1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("i32[3]"));
  }
}

TEST(Array, I1IsOneByteZeroOrOne) {
  Array b = Array::from_doubles(T(DType::i1, {4}), {0.0, 2.0, -0.5, 1.0});
  ASSERT_EQ(b.bytes(), 4u);
  const uint8_t* p = b.data<uint8_t>();
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[1], 1);
  EXPECT_EQ(p[2], 1);
  EXPECT_EQ(p[3], 1);
  b.set(1, 0.0);
  EXPECT_EQ(p[1], 0);
  b.set(0, 42.0);
  EXPECT_EQ(p[0], 1);
}

TEST(Array, FromDoublesRoundsIntoTheDtype) {
  Array f = Array::from_doubles(T(DType::f32, {1}), {0.1});
  EXPECT_EQ(f.data<float>()[0], 0.1f);
  Array i = Array::from_doubles(T(DType::i32, {2}), {2.9, -2.9});
  EXPECT_EQ(i.data<int32_t>()[0], 2);
  EXPECT_EQ(i.data<int32_t>()[1], -2);
  // Beyond i32's range a plain cast is undefined (x86 gives INT32_MIN for
  // both): the convert op's rule instead, saturating with NaN to 0.
  Array big = Array::from_doubles(T(DType::i32, {3}), {3e9, -3e9, std::nan("")});
  EXPECT_EQ(big.data<int32_t>()[0], 2147483647);
  EXPECT_EQ(big.data<int32_t>()[1], -2147483647 - 1);
  EXPECT_EQ(big.data<int32_t>()[2], 0);
}

TEST(Array, CopyIsDeep) {
  Array a = Array::f32({3}, {1, 2, 3});
  Array b = a;
  EXPECT_NE(a.raw(), b.raw());
  EXPECT_TRUE(aligned64(b.raw()));
  b.set(0, 10.0);
  EXPECT_EQ(a.get(0), 1.0);
  Array c(T(DType::i32, {7}));
  c = a;
  EXPECT_EQ(c.type(), a.type());
  EXPECT_TRUE(c.bit_equal(a));
  c.set(2, -1.0);
  EXPECT_EQ(a.get(2), 3.0);
  Array m = std::move(c);
  EXPECT_EQ(m.get(2), -1.0);
}

TEST(Array, ResetReusesTheAllocationWhenItFits) {
  Array a(T(DType::f32, {16}));  // 64 bytes
  const void* p = a.raw();
  a.reset(T(DType::i32, {4, 4}));   // same bytes
  EXPECT_EQ(a.raw(), p);
  EXPECT_EQ(a.type(), T(DType::i32, {4, 4}));
  a.reset(T(DType::i1, {10}));      // smaller
  EXPECT_EQ(a.raw(), p);
  EXPECT_EQ(a.bytes(), 10u);
  a.reset(T(DType::f64, {8}));      // 64 bytes again: still fits
  EXPECT_EQ(a.raw(), p);
  a.reset(T(DType::f64, {100}));    // larger: a new block
  EXPECT_EQ(a.bytes(), 800u);
  EXPECT_TRUE(aligned64(a.raw()));
  a.set(99, 1.0);
  EXPECT_EQ(a.get(99), 1.0);
}

TEST(Array, ConvertedFollowsConvertRules) {
  Array f = Array::f32({5}, {-2.7f, -0.2f, 0.0f, 0.6f, 3.9f});
  EXPECT_EQ(f.converted(DType::i32).to_doubles(), (std::vector<double>{-2, 0, 0, 0, 3}));
  EXPECT_EQ(f.converted(DType::i1).to_doubles(), (std::vector<double>{1, 1, 0, 1, 1}));
  Array b = Array::from_doubles(T(DType::i1, {2}), {1, 0});
  EXPECT_EQ(b.converted(DType::f64).to_doubles(), (std::vector<double>{1, 0}));
  Array d = f.converted(DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_EQ(d.get(0), static_cast<double>(-2.7f));
}

TEST(Array, OutOfRangeElementAccessThrows) {
  Array a(T(DType::f32, {2}));
  EXPECT_THROW(a.get(2), Error);
  EXPECT_THROW(a.set(-1, 0.0), Error);
}

// A shape whose byte count overflows used to wrap to a tiny (here zero-byte)
// allocation that claimed 2^64 elements.
TEST(Array, ShapesWhoseSizeOverflowsAreRefused) {
  const int64_t huge = int64_t{1} << 62;
  try {
    Array a(T(DType::f32, {huge, 4}));
    ADD_FAILURE() << "no error for f32[2^62,4]; numel() = " << a.numel();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("more bytes than a 64-bit size can count"));
  }
  Array b;
  EXPECT_THROW(b.reset(T(DType::f64, {huge, 2})), Error);
  EXPECT_THROW(Array(T(DType::f32, {-1, 3})), Error);
}

TEST(Array, DefaultConstructedHasNoStorageUntilReset) {
  Array a;  // f32[] by type, but no bytes
  EXPECT_EQ(a.raw(), nullptr);
  EXPECT_THROW(a.get(0), Error);
  Array b = a;  // copies as empty, no crash
  EXPECT_EQ(b.raw(), nullptr);
  b = Array::scalar(3.0);
  a = b;
  EXPECT_EQ(a.get(0), 3.0);
  Array c;
  c.reset(T(DType::f32, {}));
  ASSERT_NE(c.raw(), nullptr);
  c.set(0, 1.5);
  EXPECT_EQ(c.get(0), 1.5);
}

TEST(Array, BitEqualAndMaxRelDiff) {
  Array a = Array::f32({3}, {1, 2, 4});
  Array b = Array::f32({3}, {1, 2.5f, 4});
  EXPECT_FALSE(a.bit_equal(b));
  EXPECT_TRUE(a.bit_equal(Array(a)));
  EXPECT_FALSE(a.bit_equal(Array::f32({1, 3}, {1, 2, 4})));  // same bytes, other shape
  EXPECT_DOUBLE_EQ(max_rel_diff(a, b), 0.5 / 2.5);
  EXPECT_EQ(max_rel_diff(a, a), 0.0);
  Array z1 = Array::f32({1}, {0}), z2 = Array::f32({1}, {1e-40f});
  EXPECT_DOUBLE_EQ(max_rel_diff(z1, z2, 1e-3), static_cast<double>(1e-40f) / 1e-3);  // the floor
  Array n1 = Array::f32({1}, {NAN}), n2 = Array::f32({1}, {1});
  EXPECT_TRUE(std::isinf(max_rel_diff(n1, n2)));
  EXPECT_EQ(max_rel_diff(n1, n1), 0.0);
  EXPECT_THROW(max_rel_diff(a, Array::f32({2}, {1, 2})), Error);
}

}  // namespace
