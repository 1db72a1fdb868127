#pragma once
// Portable random numbers for the datasets and the sampler. The standard distributions (uniform_int_distribution,
// normal_distribution) are implementation-defined, so the same seed would give different data and batch orders
// with libstdc++ and libc++; these transforms of std::mt19937_64 (whose output the standard fixes) do not.
#include <cmath>
#include <cstdint>
#include <random>

#include "baton/mix64.h"

namespace baton::detail {

class PortableRandom {
 public:
  explicit PortableRandom(std::uint64_t seed) : engine_(baton::mix64(seed)) {}

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  /// Uniform integer in [0, bound), bound > 0, without modulo bias: draws in the incomplete top range are redrawn.
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    std::uint64_t x = engine_();
    while (x >= limit) x = engine_();
    return x % bound;
  }

  /// Standard normal by Box-Muller (one value per call; simpler than caching the pair, and speed does not matter).
  double normal() {
    const double u1 = 1.0 - uniform();  // in (0, 1], so log(u1) is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace baton::detail
