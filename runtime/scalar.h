// Scalar: a host number passed to an op (x * 2.5, clamp bounds, fill values). It keeps
// its category (bool, integer, floating) because PyTorch's promotion depends on it.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "runtime/dtype.h"

namespace kiln {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() : kind_(Kind::Int), i_(0) {}
  Scalar(bool b) : kind_(Kind::Bool), i_(b) {}
  Scalar(int v) : kind_(Kind::Int), i_(v) {}
  Scalar(int64_t v) : kind_(Kind::Int), i_(v) {}
  Scalar(long long v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}
  Scalar(float v) : kind_(Kind::Float), d_(v) {}
  Scalar(double v) : kind_(Kind::Float), d_(v) {}

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }

  double to_double() const { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  template <class T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>)
      return kind_ == Kind::Float ? d_ != 0.0 : i_ != 0;
    else if constexpr (std::is_integral_v<T>)
      return static_cast<T>(to_int());
    else if constexpr (std::is_floating_point_v<T>)
      return static_cast<T>(to_double());
    else
      return static_cast<T>(static_cast<float>(to_double()));  // Half, BFloat16
  }
  // Used as the value of a tensor of dtype d (Half/BFloat16 go through float).
  template <class T>
  T as() const {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      return T(static_cast<float>(to_double()));
    else if constexpr (std::is_floating_point_v<T>)
      return static_cast<T>(to_double());
    else
      return to<T>();
  }
  // The dtype a 0-dim tensor holding this value would have (bool, int64, float32 default).
  DType default_dtype() const {
    return kind_ == Kind::Bool ? DType::Bool : kind_ == Kind::Int ? DType::Int64 : kDefaultFloat;
  }
  bool operator==(const Scalar& o) const {
    return kind_ == o.kind_ && (kind_ == Kind::Float ? d_ == o.d_ : i_ == o.i_);
  }
  std::string str() const;

 private:
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

}  // namespace kiln
