// Counter-based random numbers: a value is a pure function of its
// coordinates (a hash), never of what was drawn before it, so any element of
// a synthetic weight, a modelled duration or a generated night can be
// reproduced alone. SplitMix64's finaliser (Steele, Lea, Flood 2014) is the
// hash; Box-Muller turns two hashes into a standard normal.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace pipebench {

// SplitMix64's increment (2^64 / golden ratio): a stream's state advances by it.
inline constexpr std::uint64_t kSplitMixIncrement = 0x9e3779b97f4a7c15ull;

// SplitMix64: advance by the increment, then finalise.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += kSplitMixIncrement;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The top 53 bits as a double in the open interval (0, 1): never 0, so
// log() is always finite.
constexpr double unit_uniform(std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

// A standard normal from two independent hashes (Box-Muller, cosine branch).
inline double standard_normal(std::uint64_t h1, std::uint64_t h2) {
  return std::sqrt(-2.0 * std::log(unit_uniform(h1))) * std::cos(2.0 * std::numbers::pi * unit_uniform(h2));
}

}  // namespace pipebench
