#pragma once
// Random draws for the stochastic built-in algorithms (mixup, cutmix, progressive_resizing's crop). Each batch gets
// a generator of its own, seeded by the run's seed, the rank, the batch count and the plugin, not the global
// LibTorch generator: a run stopped and resumed from a checkpoint then draws exactly what the uninterrupted run
// drew at every batch, whatever else consumed random numbers in between, and two plugins never share a stream.
// Header-only and SDK-only, so every plugin that includes it stays a library of its own.
#include <cmath>
#include <cstdint>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "baton/mix64.h"
#include "baton/state.h"

namespace baton_algorithms {

using baton::mix64;

// FNV-1a of the plugin's name: a stable salt, so the same batch draws differently in mixup and in cutmix.
inline std::uint64_t name_salt(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

class BatchRandom {
 public:
  /// The generator of the batch about to be trained (timestamp().batch is its 0-based index from
  /// after_dataloader to after_train_batch). Ranks draw independently: their batches differ anyway.
  BatchRandom(const baton::State& state, std::string_view plugin)
      : engine_(mix64(mix64(mix64(state.facts.seed()) ^ name_salt(plugin)) ^
                      mix64(static_cast<std::uint64_t>(state.timestamp().batch) * 0x10001ULL +
                            static_cast<std::uint64_t>(state.facts.rank())))) {}

  /// Uniform in [0, 1), from the top 53 bits (the same on every platform, unlike std::uniform_real_distribution).
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  /// Uniform integer in [0, n), n >= 1, without modulo bias.
  std::int64_t below(std::int64_t n) {
    const std::uint64_t range = static_cast<std::uint64_t>(n);
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    std::uint64_t x = engine_();
    while (x >= limit) x = engine_();
    return static_cast<std::int64_t>(x % range);
  }

  /// Uniform integer in [low, high), high > low (numpy's randint(low, high)).
  std::int64_t between(std::int64_t low, std::int64_t high) { return low + below(high - low); }

  /// Beta(a, b), a, b > 0, as X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b).
  double beta(double a, double b) {
    const double x = std::gamma_distribution<double>(a, 1.0)(engine_);
    const double y = std::gamma_distribution<double>(b, 1.0)(engine_);
    // Both underflow to 0 for a tiny alpha, where the distribution sits at its two ends anyway.
    if (x + y == 0) return uniform() < 0.5 ? 0.0 : 1.0;
    return x / (x + y);
  }

  /// A uniformly random permutation of 0..n-1 (Fisher-Yates).
  std::vector<std::int64_t> permutation(std::int64_t n) {
    std::vector<std::int64_t> p(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
    for (std::int64_t i = n - 1; i > 0; --i) std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(below(i + 1))]);
    return p;
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace baton_algorithms
