#pragma once
// Seeds: the default one, and SplitMix64's finaliser, the one seed mixer of baton and its plugins: it spreads nearby inputs (a seed, a batch
// count, a rank: 0, 1, 2 ...) into unrelated 64-bit values, so generators seeded from them draw unrelated streams.
#include <cstdint>

namespace baton {

/// The seed of a run that names none: data order, model initialisation, datasets that draw.
inline constexpr std::uint64_t kDefaultSeed = 42;

constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace baton
