#include "ema/ema_kernel.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace baton::ema_kernel {
namespace {

// Distinct 16-bit types so overloads pick the right conversion while loops stay on plain integers (vectorisable).
enum class Bf16 : std::uint16_t {};
enum class F16 : std::uint16_t {};

// Below this many elements a parallel region costs more than it saves.
constexpr std::int64_t kParallelThreshold = std::int64_t{1} << 15;
// Chunk boundaries are kept on multiples of this many elements so that every chunk starts 64-byte aligned.
constexpr std::int64_t kAlignElements = 16;

inline float bits_to_float(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline std::uint32_t float_to_bits(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

template <class T>
inline T load(float x) { return static_cast<T>(x); }
template <class T>
inline T load(double x) { return static_cast<T>(x); }
template <class T>
inline T load(Bf16 x) { return static_cast<T>(bits_to_float(static_cast<std::uint32_t>(x) << 16)); }
// IEEE half <-> float with the bit tricks of c10/util/Half.h (FP16 library), rewritten without branches or
// unsigned compares so that the loops around them vectorise.
inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t two_w = static_cast<std::uint32_t>(h) << 17;  // exponent and mantissa, sign dropped
  // Normal numbers (and inf/NaN): move the exponent into place and rescale by 2^-112.
  const float normal = bits_to_float((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  // Subnormals: place the mantissa under an exponent of 2^-1 and subtract the implicit 0.5.
  const float subnormal = bits_to_float((two_w >> 17) | (126u << 23)) - 0.5f;
  const std::uint32_t subnormal_mask = 0u - static_cast<std::uint32_t>((h & 0x7C00) == 0);
  return bits_to_float(sign | (float_to_bits(subnormal) & subnormal_mask) | (float_to_bits(normal) & ~subnormal_mask));
}

inline std::uint16_t float_to_half(float f) {
  const std::uint32_t w = float_to_bits(f);
  const std::uint32_t sign = w & 0x80000000u;
  const std::int32_t magnitude = static_cast<std::int32_t>(w & 0x7FFFFFFFu);
  // Scaling up then down rounds to the half's precision (nearest even) and saturates to inf.
  float base = (bits_to_float(static_cast<std::uint32_t>(magnitude)) * 0x1.0p+112f) * 0x1.0p-110f;
  std::int32_t bias = magnitude & 0x7F800000;
  bias = std::max(bias, 0x38800000);  // (0x71000000 >> 1): the smallest normal half's exponent
  base = bits_to_float(static_cast<std::uint32_t>(bias + 0x07800000)) + base;
  const std::uint32_t bits = float_to_bits(base);
  const std::uint32_t nonsign = ((bits >> 13) & 0x7C00u) + (bits & 0x0FFFu);
  const std::uint32_t nan_mask = 0u - static_cast<std::uint32_t>(magnitude > 0x7F800000);
  return static_cast<std::uint16_t>((sign >> 16) | (0x7E00u & nan_mask) | (nonsign & ~nan_mask));
}

template <class T>
inline T load(F16 x) { return static_cast<T>(half_to_float(static_cast<std::uint16_t>(x))); }

template <class T>
inline void store(float& out, T x) { out = static_cast<float>(x); }
template <class T>
inline void store(double& out, T x) { out = static_cast<double>(x); }
template <class T>
inline void store(Bf16& out, T x) {
  // Round to nearest even, as c10::BFloat16 does; NaN stays a quiet NaN.
  const float f = static_cast<float>(x);
  const std::uint32_t bits = float_to_bits(f);
  const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  out = static_cast<Bf16>(f != f ? 0x7FC0u : rounded);
}
template <class T>
inline void store(F16& out, T x) { out = static_cast<F16>(float_to_half(static_cast<float>(x))); }

// fp64 arithmetic when either side is fp64 (no precision is thrown away), fp32 otherwise.
template <class E, class W>
using Compute = std::conditional_t<std::is_same_v<E, double> || std::is_same_v<W, double>, double, float>;

// Software prefetch a few KiB ahead of each stream. Whether it pays depends on the processor: where each core keeps
// too few cache misses in flight for three streams (a Xeon of two cores measured here) it lifts the update towards
// the memory bandwidth; where the hardware prefetcher already keeps up (the 2-core AMD EPYC of later sessions) the
// extra instructions cost 5-8 %. So both loops are compiled and a Plan times them on its first updates.
constexpr std::int64_t kBlock = 64;             // elements per prefetch step (one to four cache lines per stream)
constexpr std::int64_t kPrefetchBytes = 2048;
constexpr std::int64_t kCacheLine = 64;

template <int Write, class T>
inline void prefetch_ahead(const T* p) {
  const char* base = reinterpret_cast<const char*>(p) + kPrefetchBytes;
  for (std::int64_t offset = 0; offset < kBlock * static_cast<std::int64_t>(sizeof(T)); offset += kCacheLine)
    __builtin_prefetch(base + offset, Write);  // never faults, even past the end of the buffer
}

// f(e[i], w[i]) for i in [0, n), vectorised in blocks of kBlock, with the prefetches above when Prefetch is set.
template <bool Prefetch, class E, class W, class F>
inline void for_each_pair(E* __restrict e, const W* __restrict w, std::int64_t n, F f) {
  std::int64_t i = 0;
  if constexpr (Prefetch) {
    for (; i + kBlock <= n; i += kBlock) {
      prefetch_ahead<1>(e + i);
      prefetch_ahead<0>(w + i);
#pragma omp simd
      for (std::int64_t j = i; j < i + kBlock; ++j) f(e[j], w[j]);
    }
  }
#pragma omp simd
  for (std::int64_t j = i; j < n; ++j) f(e[j], w[j]);
}

template <bool Prefetch, class E, class W>
void average(void* ema, const void* weight, std::int64_t begin, std::int64_t end, double blend) {
  using T = Compute<E, W>;
  const T a = static_cast<T>(blend);
  for_each_pair<Prefetch>(static_cast<E*>(ema) + begin, static_cast<const W*>(weight) + begin, end - begin,
                          [a](E& e, const W& w) {
                            const T x = load<T>(e);
                            store(e, x + a * (load<T>(w) - x));
                          });
}

template <bool Prefetch, class E, class W>
void convert(void* ema, const void* weight, std::int64_t begin, std::int64_t end, double) {
  using T = Compute<E, W>;
  for_each_pair<Prefetch>(static_cast<E*>(ema) + begin, static_cast<const W*>(weight) + begin, end - begin,
                          [](E& e, const W& w) { store(e, load<T>(w)); });
}

void copy_bytes(void* ema, const void* weight, std::int64_t begin, std::int64_t end, double) {
  std::memcpy(static_cast<char*>(ema) + begin, static_cast<const char*>(weight) + begin,
              static_cast<std::size_t>(end - begin));
}

using Kernel = void (*)(void*, const void*, std::int64_t, std::int64_t, double);
constexpr int kFloatTypes = 4;  // f32, f64, bf16, f16: the order of Element

template <bool Prefetch>
struct Ops {
  template <class E, class W>
  struct Average {
    static constexpr Kernel fn = &average<Prefetch, E, W>;
  };
  template <class E, class W>
  struct Convert {
    static constexpr Kernel fn = &convert<Prefetch, E, W>;
  };
};

template <template <class, class> class Op, class E>
constexpr std::array<Kernel, kFloatTypes> row() {
  return {Op<E, float>::fn, Op<E, double>::fn, Op<E, Bf16>::fn, Op<E, F16>::fn};
}

template <template <class, class> class Op>
constexpr std::array<std::array<Kernel, kFloatTypes>, kFloatTypes> table() {
  return {row<Op, float>(), row<Op, double>(), row<Op, Bf16>(), row<Op, F16>()};
}

// [Loop]: the plain loop first, then the prefetching one.
constexpr std::array<std::array<std::array<Kernel, kFloatTypes>, kFloatTypes>, 2> kAverage = {
    table<Ops<false>::Average>(), table<Ops<true>::Average>()};
constexpr std::array<std::array<std::array<Kernel, kFloatTypes>, kFloatTypes>, 2> kConvert = {
    table<Ops<false>::Convert>(), table<Ops<true>::Convert>()};

Kernel kernel_for(const Task& task, bool copy_all, Loop loop) {
  if (task.ema_type == Element::bytes) return &copy_bytes;
  const auto e = static_cast<int>(task.ema_type), w = static_cast<int>(task.weight_type);
  const auto l = static_cast<int>(loop);
  return (task.copy || copy_all) ? kConvert[l][e][w] : kAverage[l][e][w];
}

}  // namespace

int default_threads() {
  // LibTorch sets OpenMP's thread count to half the logical processors (it assumes hyper-threading), so
  // omp_get_max_threads() after the first LibTorch op is often too low for a memory-bound loop. An explicit
  // OMP_NUM_THREADS is honoured.
  static const int threads = std::getenv("OMP_NUM_THREADS") ? omp_get_max_threads() : omp_get_num_procs();
  return threads;
}

bool Task::operator==(const Task& other) const {
  return ema == other.ema && weight == other.weight && numel == other.numel && ema_type == other.ema_type &&
         weight_type == other.weight_type && copy == other.copy;
}

Plan::Plan(std::vector<Task> tasks, std::int64_t chunk_elements) : tasks_(std::move(tasks)) {
  chunk_elements = std::max<std::int64_t>(chunk_elements, kAlignElements);
  for (std::size_t t = 0; t < tasks_.size(); ++t) {
    const Task& task = tasks_[t];
    // A bytes task counts bytes; give its chunks the size of an fp32 chunk so the work per chunk stays even.
    const std::int64_t target = task.ema_type == Element::bytes ? chunk_elements * 4 : chunk_elements;
    const std::int64_t pieces = (task.numel + target - 1) / target;
    if (pieces == 0) continue;
    // Equal pieces (not full chunks plus a remainder) so a static schedule splits the work evenly.
    std::int64_t size = (task.numel + pieces - 1) / pieces;
    size = (size + kAlignElements - 1) / kAlignElements * kAlignElements;
    for (std::int64_t begin = 0; begin < task.numel; begin += size)
      chunks_.push_back({static_cast<std::uint32_t>(t), begin, std::min(begin + size, task.numel)});
    elements_ += task.numel;
  }
}

void Plan::run_chunk(const Chunk& chunk, double blend, bool copy_all, Loop loop) const {
  const Task& task = tasks_[chunk.task];
  kernel_for(task, copy_all, loop)(task.ema, task.weight, chunk.begin, chunk.end, blend);
}

// Small plans stay in cache, where the loops differ by noise: no trials.
bool Plan::timing() const { return !forced_ && elements_ >= kTuneElements && trials_ < 2 * kTrialsPerLoop; }

Loop Plan::next_loop() const {
  if (forced_) return *forced_;
  if (elements_ < kTuneElements) return Loop::plain;
  if (timing()) return static_cast<Loop>(trials_ % 2);
  return fastest_[0] <= fastest_[1] ? Loop::plain : Loop::prefetch;
}

int Plan::run(double smoothing, int threads) const {
  if (chunks_.empty()) return 0;
  const int wanted = threads > 0 ? threads : default_threads();
  const bool copy_all = smoothing == 0.0;
  const double blend = 1.0 - smoothing;
  const auto count = static_cast<std::int64_t>(chunks_.size());
  const Loop loop = next_loop();
  const bool trial = timing();
  const auto start = std::chrono::steady_clock::now();
  int used = 1;
#pragma omp parallel num_threads(wanted) if (elements_ >= kParallelThreshold)
  {
#pragma omp single nowait
    used = omp_get_num_threads();
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < count; ++i) run_chunk(chunks_[static_cast<std::size_t>(i)], blend, copy_all, loop);
  }
  if (trial) {
    // The fastest of each loop's trials, so one run slowed by another process does not decide.
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double& best = fastest_[static_cast<int>(loop)];
    best = std::min(best, seconds);
    ++trials_;
  }
  return used;
}

std::optional<Loop> Plan::chosen_loop() const {
  if (timing()) return std::nullopt;
  return next_loop();
}

}  // namespace baton::ema_kernel
