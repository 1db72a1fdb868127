#include "ema/ema_kernel.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include <c10/util/Half.h>

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
template <class T>
inline T load(F16 x) { return static_cast<T>(c10::detail::fp16_ieee_to_fp32_value(static_cast<std::uint16_t>(x))); }

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
inline void store(F16& out, T x) { out = static_cast<F16>(c10::detail::fp16_ieee_from_fp32_value(static_cast<float>(x))); }

// fp64 arithmetic when either side is fp64 (no precision is thrown away), fp32 otherwise.
template <class E, class W>
using Compute = std::conditional_t<std::is_same_v<E, double> || std::is_same_v<W, double>, double, float>;

template <class E, class W>
void average(void* ema, const void* weight, std::int64_t begin, std::int64_t end, double blend) {
  using T = Compute<E, W>;
  E* __restrict e = static_cast<E*>(ema) + begin;
  const W* __restrict w = static_cast<const W*>(weight) + begin;
  const T a = static_cast<T>(blend);
  const std::int64_t n = end - begin;
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const T x = load<T>(e[i]);
    store(e[i], x + a * (load<T>(w[i]) - x));
  }
}

template <class E, class W>
void convert(void* ema, const void* weight, std::int64_t begin, std::int64_t end, double) {
  using T = Compute<E, W>;
  E* __restrict e = static_cast<E*>(ema) + begin;
  const W* __restrict w = static_cast<const W*>(weight) + begin;
  const std::int64_t n = end - begin;
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) store(e[i], load<T>(w[i]));
}

void copy_bytes(void* ema, const void* weight, std::int64_t begin, std::int64_t end, double) {
  std::memcpy(static_cast<char*>(ema) + begin, static_cast<const char*>(weight) + begin,
              static_cast<std::size_t>(end - begin));
}

using Kernel = void (*)(void*, const void*, std::int64_t, std::int64_t, double);
constexpr int kFloatTypes = 4;  // f32, f64, bf16, f16: the order of Element

template <class E, class W>
struct AverageOp {
  static constexpr Kernel fn = &average<E, W>;
};
template <class E, class W>
struct ConvertOp {
  static constexpr Kernel fn = &convert<E, W>;
};

template <template <class, class> class Op, class E>
constexpr std::array<Kernel, kFloatTypes> row() {
  return {Op<E, float>::fn, Op<E, double>::fn, Op<E, Bf16>::fn, Op<E, F16>::fn};
}

template <template <class, class> class Op>
constexpr std::array<std::array<Kernel, kFloatTypes>, kFloatTypes> table() {
  return {row<Op, float>(), row<Op, double>(), row<Op, Bf16>(), row<Op, F16>()};
}

constexpr auto kAverage = table<AverageOp>();
constexpr auto kConvert = table<ConvertOp>();

Kernel kernel_for(const Task& task, bool copy_all) {
  if (task.ema_type == Element::bytes || (task.ema_type == task.weight_type && (task.copy || copy_all)))
    return &copy_bytes;
  const auto e = static_cast<int>(task.ema_type), w = static_cast<int>(task.weight_type);
  return (task.copy || copy_all) ? kConvert[e][w] : kAverage[e][w];
}

}  // namespace

std::int64_t element_size(Element element) {
  switch (element) {
    case Element::f32: return 4;
    case Element::f64: return 8;
    case Element::bf16:
    case Element::f16: return 2;
    case Element::bytes: return 1;
  }
  return 1;
}

bool Task::operator==(const Task& other) const {
  return ema == other.ema && weight == other.weight && numel == other.numel && ema_type == other.ema_type &&
         weight_type == other.weight_type && copy == other.copy;
}

bool supported(Element ema_type, Element weight_type) {
  return (ema_type == Element::bytes) == (weight_type == Element::bytes);
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

void Plan::run_chunk(const Chunk& chunk, double blend, bool copy_all) const {
  const Task& task = tasks_[chunk.task];
  kernel_for(task, copy_all)(task.ema, task.weight, chunk.begin, chunk.end, blend);
}

int Plan::run(double smoothing, int threads) const {
  if (chunks_.empty()) return 0;
  const int wanted = threads > 0 ? threads : omp_get_max_threads();
  const bool copy_all = smoothing == 0.0;
  const double blend = 1.0 - smoothing;
  const auto count = static_cast<std::int64_t>(chunks_.size());
  int used = 1;
#pragma omp parallel num_threads(wanted) if (elements_ >= kParallelThreshold)
  {
#pragma omp single nowait
    used = omp_get_num_threads();
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < count; ++i) run_chunk(chunks_[static_cast<std::size_t>(i)], blend, copy_all);
  }
  return used;
}

}  // namespace baton::ema_kernel
