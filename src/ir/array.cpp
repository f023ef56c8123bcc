// capstep::Array: a Type and 64-byte aligned bytes it owns.
//
// Storage comes from the aligned global operator new, so that a test which
// replaces operator new sees every allocation an Array makes.
#include "capstep/array.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "ir/bf16.h"
#include "ir/scalar_math.h"

namespace capstep {
namespace {

constexpr size_t kAlign = 64;

void* alloc_bytes(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  return ::operator new(rounded, std::align_val_t{kAlign});
}

size_t rounded(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

void check_shape(const Type& t) { validate_type(t, "Array"); }

void check_count(const char* who, const Type& t, size_t n) {
  if (static_cast<int64_t>(n) != t.numel())
    throw Error(std::string(who) + ": " + std::to_string(n) + " values for " + t.str() + " (need " +
                std::to_string(t.numel()) + ")");
}

// Reads element i of `p` (dtype d) as a value of type To, with scalar_math's
// convert rules (float -> int truncates, any -> i1 is != 0).
template <class To>
To load_as(DType d, const void* p, int64_t i) {
  switch (d) {
    case DType::f32: return scalar::convert<To, float>(static_cast<const float*>(p)[i]);
    case DType::f64: return scalar::convert<To, double>(static_cast<const double*>(p)[i]);
    case DType::i32: return scalar::convert<To, int>(static_cast<const int32_t*>(p)[i]);
    case DType::i1: return static_cast<To>(static_cast<const uint8_t*>(p)[i] != 0);
    case DType::bf16: return scalar::convert<To, float>(bf16::to_float(static_cast<const uint16_t*>(p)[i]));
  }
  return To{};
}

// A default-constructed Array has the type f32[] but no bytes yet.
void check_index(const char* who, const Array& a, int64_t i) {
  if (i < 0 || i >= a.numel())
    throw Error(std::string(who) + ": index " + std::to_string(i) + " out of range for " + a.type().str());
  if (a.raw() == nullptr) throw Error(std::string(who) + ": the array has no storage (default-constructed)");
}

}  // namespace

void Array::Free::operator()(void* p) const { ::operator delete(p, std::align_val_t{kAlign}); }

Array::Array(Type t) : type_(std::move(t)) {
  check_shape(type_);
  capacity_ = rounded(type_.bytes());
  data_.reset(alloc_bytes(type_.bytes()));
  if (capacity_) std::memset(data_.get(), 0, capacity_);
}

Array::Array(Type t, const void* src) : type_(std::move(t)) {
  check_shape(type_);
  capacity_ = rounded(type_.bytes());
  data_.reset(alloc_bytes(type_.bytes()));
  if (type_.bytes()) std::memcpy(data_.get(), src, type_.bytes());
}

// A default-constructed Array (type f32[], no bytes) copies as one.
Array::Array(const Array& o) : type_(o.type_) {
  if (!o.data_) return;
  capacity_ = rounded(type_.bytes());
  data_.reset(alloc_bytes(type_.bytes()));
  if (type_.bytes()) std::memcpy(data_.get(), o.data_.get(), type_.bytes());
}

Array& Array::operator=(const Array& o) {
  if (this == &o) return *this;
  if (!o.data_) {
    type_ = o.type_;
    data_.reset();
    capacity_ = 0;
    return *this;
  }
  reset(o.type_);
  if (type_.bytes()) std::memcpy(data_.get(), o.data_.get(), type_.bytes());
  return *this;
}

Array Array::f32(Shape s, const std::vector<float>& v) {
  Type t{DType::f32, std::move(s)};
  check_shape(t);
  check_count("Array::f32", t, v.size());
  return Array(t, v.data());
}

Array Array::f64(Shape s, const std::vector<double>& v) {
  Type t{DType::f64, std::move(s)};
  check_shape(t);
  check_count("Array::f64", t, v.size());
  return Array(t, v.data());
}

Array Array::i32(Shape s, const std::vector<int32_t>& v) {
  Type t{DType::i32, std::move(s)};
  check_shape(t);
  check_count("Array::i32", t, v.size());
  return Array(t, v.data());
}

Array Array::from_doubles(Type t, const std::vector<double>& v) {
  check_shape(t);
  check_count("Array::from_doubles", t, v.size());
  Array a(std::move(t));
  for (size_t i = 0; i < v.size(); ++i) a.set(static_cast<int64_t>(i), v[i]);
  return a;
}

double Array::get(int64_t i) const {
  check_index("Array::get", *this, i);
  return load_as<double>(type_.dtype, raw(), i);
}

void Array::set(int64_t i, double v) {
  check_index("Array::set", *this, i);
  switch (type_.dtype) {
    case DType::f32: data<float>()[i] = static_cast<float>(v); return;
    case DType::f64: data<double>()[i] = v; return;
    case DType::i32: data<int32_t>()[i] = scalar::convert<int32_t, double>(v); return;  // saturates; NaN -> 0
    case DType::i1: data<uint8_t>()[i] = v != 0.0 ? 1 : 0; return;
    case DType::bf16: data<uint16_t>()[i] = bf16::from_double(v); return;  // rounded once, to nearest even
  }
}

std::vector<double> Array::to_doubles() const {
  if (numel() > 0) check_index("Array::to_doubles", *this, 0);
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[static_cast<size_t>(i)] = load_as<double>(type_.dtype, raw(), i);
  return out;
}

Array Array::converted(DType to) const {
  if (numel() > 0) check_index("Array::converted", *this, 0);
  Array out(Type{to, type_.shape});
  const int64_t n = numel();
  switch (to) {
    case DType::f32:
      for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = load_as<float>(type_.dtype, raw(), i);
      break;
    case DType::f64:
      for (int64_t i = 0; i < n; ++i) out.data<double>()[i] = load_as<double>(type_.dtype, raw(), i);
      break;
    case DType::i32:
      for (int64_t i = 0; i < n; ++i) out.data<int32_t>()[i] = load_as<int>(type_.dtype, raw(), i);
      break;
    case DType::i1:
      for (int64_t i = 0; i < n; ++i) out.data<uint8_t>()[i] = load_as<bool>(type_.dtype, raw(), i) ? 1 : 0;
      break;
    case DType::bf16:  // through double: exact for every source dtype, then one rounding
      for (int64_t i = 0; i < n; ++i) out.data<uint16_t>()[i] = bf16::from_double(load_as<double>(type_.dtype, raw(), i));
      break;
  }
  return out;
}

void Array::reset(const Type& t) {
  check_shape(t);
  if (t.bytes() > capacity_) {
    data_.reset(alloc_bytes(t.bytes()));
    capacity_ = rounded(t.bytes());
  }
  if (&t != &type_) {
    type_.dtype = t.dtype;
    type_.shape.assign(t.shape.begin(), t.shape.end());  // reuses the shape's own storage when it fits
  }
}

bool Array::bit_equal(const Array& o) const {
  if (type_ != o.type_) return false;
  if (!raw() || !o.raw()) return type_.bytes() == 0 || raw() == o.raw();
  return type_.bytes() == 0 || std::memcmp(raw(), o.raw(), type_.bytes()) == 0;
}

double max_rel_diff(const Array& a, const Array& b, double floor) {
  if (a.shape() != b.shape())
    throw Error("max_rel_diff: shapes differ: " + a.type().str() + " vs " + b.type().str());
  double worst = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.get(i), y = b.get(i);
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;  // equal infinities and NaNs agree
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    double d = std::fabs(x - y) / std::max({std::fabs(x), std::fabs(y), floor});
    if (std::isnan(d)) return INFINITY;  // inf vs finite
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace capstep
