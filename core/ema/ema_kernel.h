#pragma once
// The CPU update kernel of baton::ExponentialMovingAverage, free of LibTorch so it stays cheap to compile and test.
// A Plan is built once per memory layout (the tensors' addresses do not change between updates): every tensor is
// cut into chunks of about kChunkElements, and one OpenMP parallel loop runs all chunks of all tensors, so a model
// of a few hundred tensors costs one parallel region per update, not one per tensor.
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace baton::ema_kernel {

/// Element types the kernel converts on the fly; anything else (integers, bool) is copied as bytes.
enum class Element : std::uint8_t { f32, f64, bf16, f16, bytes };

/// One tensor pair. An averaged task does ema <- ema + (1 - s) * (weight - ema), in fp32 arithmetic (fp64 when
/// either side is fp64), reading bf16/fp16 as fp32 and rounding back to nearest-even when storing them. A copy task
/// converts weight into ema. Both buffers are dense and `numel` elements long (bytes when the types are
/// Element::bytes, which only pairs with itself: a copy of any same-dtype tensor).
struct Task {
  void* ema = nullptr;
  const void* weight = nullptr;
  std::int64_t numel = 0;
  Element ema_type = Element::f32;
  Element weight_type = Element::f32;
  bool copy = false;
  bool operator==(const Task& other) const;
  bool operator!=(const Task& other) const { return !(*this == other); }
};

/// One thread per processor available to the process, or OMP_NUM_THREADS when it is set (read once).
int default_threads();

constexpr std::int64_t kChunkElements = std::int64_t{1} << 16;

/// The two compiled forms of the streaming loop: identical arithmetic (bit-identical results), different speed by
/// processor (ema_kernel.cpp says why). A plan of at least kTuneElements elements runs each kTrialsPerLoop times,
/// alternating, on its first updates and keeps the faster; smaller plans run the plain loop.
enum class Loop : std::uint8_t { plain = 0, prefetch = 1 };
constexpr std::int64_t kTuneElements = std::int64_t{1} << 21;  // 8 MiB of fp32 EMA: well past the caches
constexpr int kTrialsPerLoop = 5;

class Plan {
 public:
  Plan() = default;
  explicit Plan(std::vector<Task> tasks, std::int64_t chunk_elements = kChunkElements);

  const std::vector<Task>& tasks() const { return tasks_; }
  std::size_t chunks() const { return chunks_.size(); }

  /// Runs every task once with smoothing s (s == 0 copies every tensor, so the EMA equals the weights exactly).
  /// threads <= 0 uses default_threads(). Returns the number of threads the parallel region ran with.
  int run(double smoothing, int threads = 0) const;

  /// The loop every later run uses: nullopt while the first runs are still timing both.
  std::optional<Loop> chosen_loop() const;
  /// Runs `loop` from now on, without trials (tests, and benchmarks that compare the two).
  void force_loop(Loop loop) { forced_ = loop; }

 private:
  struct Chunk {
    std::uint32_t task;
    std::int64_t begin;
    std::int64_t end;
  };
  void run_chunk(const Chunk& chunk, double blend, bool copy_all, Loop loop) const;
  bool timing() const;
  Loop next_loop() const;

  std::vector<Task> tasks_;
  std::vector<Chunk> chunks_;
  std::int64_t elements_ = 0;
  std::optional<Loop> forced_;
  // The trials' state: a plan belongs to one EMA, whose updates do not run concurrently.
  mutable int trials_ = 0;
  mutable double fastest_[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
};

}  // namespace baton::ema_kernel
