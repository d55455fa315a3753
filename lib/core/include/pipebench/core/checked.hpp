// Checked 64-bit integer arithmetic for sizes derived from a workload
// (parameter counts, byte counts). Every + and * of a CheckedInt tests for
// signed overflow and throws ArithmeticOverflow instead of wrapping, so a
// model too large to count is an error, never a negative "fits". The caller
// that knows which keys produced the numbers (plan/plan.cpp) turns it into a
// ConfigError naming them.
#pragma once

#include <cstdint>

#include "pipebench/core/error.hpp"

namespace pipebench {

// A size computation left the range of a signed 64-bit integer.
class ArithmeticOverflow : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

class CheckedInt {
 public:
  constexpr CheckedInt(std::int64_t v) : v_(v) {}  // NOLINT(google-explicit-constructor): built from plain sizes

  constexpr std::int64_t value() const { return v_; }

  friend CheckedInt operator+(CheckedInt a, CheckedInt b) {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a.v_, b.v_, &r)) overflow();
    return CheckedInt(r);
  }
  friend CheckedInt operator*(CheckedInt a, CheckedInt b) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a.v_, b.v_, &r)) overflow();
    return CheckedInt(r);
  }
  CheckedInt& operator+=(CheckedInt o) { return *this = *this + o; }

 private:
  [[noreturn]] static void overflow() { throw ArithmeticOverflow("a size exceeds the range of 64-bit integers"); }
  std::int64_t v_;
};

}  // namespace pipebench
