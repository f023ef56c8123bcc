// A dense, row-major host array: a Type and its bytes. The currency between
// the user, the host interpreter, the CUDA executor and checkpoints.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "capstep/ir.h"

namespace capstep {

class Array {
 public:
  Array() = default;
  explicit Array(Type t);                       // zero-filled
  Array(Type t, const void* src);               // copies t.bytes() bytes

  static Array f32(Shape s, const std::vector<float>& v);
  static Array f64(Shape s, const std::vector<double>& v);
  static Array i32(Shape s, const std::vector<int32_t>& v);
  // Values given as double, converted to t.dtype as the convert op does (i32
  // truncates and saturates, NaN -> 0; i1: nonzero -> 1; bf16 rounds once to
  // nearest even). bf16 is stored as uint16_t (the top half of an f32).
  static Array from_doubles(Type t, const std::vector<double>& v);
  static Array scalar(double v, DType d = DType::f32) { return from_doubles({d, {}}, {v}); }

  const Type& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int64_t numel() const { return type_.numel(); }
  size_t bytes() const { return type_.bytes(); }

  void* raw() { return data_.get(); }
  const void* raw() const { return data_.get(); }
  template <class T> T* data() { return static_cast<T*>(raw()); }
  template <class T> const T* data() const { return static_cast<const T*>(raw()); }

  double get(int64_t i) const;                  // element i as double
  void set(int64_t i, double v);                // element i from double
  std::vector<double> to_doubles() const;
  Array converted(DType to) const;
  // Re-types in place when the byte size is unchanged, else reallocates.
  void reset(const Type& t);

  bool bit_equal(const Array& o) const;

 private:
  Type type_;
  // 64-byte aligned storage, owned; copy makes a deep copy.
  struct Free { void operator()(void* p) const; };
  std::unique_ptr<void, Free> data_;
  size_t capacity_ = 0;

 public:
  Array(const Array& o);
  Array& operator=(const Array& o);
  Array(Array&&) noexcept = default;
  Array& operator=(Array&&) noexcept = default;
};

// Largest relative difference |a-b| / max(|a|,|b|,floor) over all elements.
double max_rel_diff(const Array& a, const Array& b, double floor = 1e-30);

}  // namespace capstep
