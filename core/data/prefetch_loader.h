#pragma once
// The data loader: background threads call Dataset::get for the batches after the one being trained on, so the
// next batch is ready when the loop asks for it. Batches come out strictly in plan order whatever the threads'
// timing, so a run is bitwise the same with any number of workers, 0 (each batch fetched in the caller's thread
// when it is asked for) included. docs/data.md describes it for users.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "baton/dataset.h"

namespace baton {

class BatchSampler;

/// Which batches a loader delivers, in order: `count` batches, batch k made of the samples indices(k).
struct BatchPlan {
  std::int64_t count = 0;
  /// The sample indices (int64, CPU) of batch k. Called for k = 0, 1, 2, ... in order and never twice at once, so
  /// it may keep state that is not thread-safe (a sampler's cached permutation).
  std::function<at::Tensor(std::int64_t)> indices;
  /// Names batch k in error messages ("batch 5 of epoch 2"); "batch <k>" when empty.
  std::function<std::string(std::int64_t)> describe;
};

/// `count` training batches from position (epoch, batch_in_epoch) on, across epoch boundaries, drawn from a copy of
/// `sampler` (the loader's threads never share the caller's).
BatchPlan sampler_plan(const BatchSampler& sampler, std::int64_t epoch, std::int64_t batch_in_epoch,
                       std::int64_t count);
/// Rows [begin, end) in order, `batch_size` at a time (the last batch may be smaller): evaluation and prediction.
BatchPlan sequential_plan(std::int64_t begin, std::int64_t end, std::int64_t batch_size);

struct PrefetchOptions {
  int workers = 1;   // threads calling Dataset::get; 0: get runs in the caller's thread, in next()
  int prefetch = 2;  // batches fetched or being fetched ahead of the caller; >= workers when workers > 0
  /// Where the batches go. A CUDA device makes the workers copy each batch into pinned (page-locked) memory, from
  /// which to_device copies without blocking.
  at::Device device = at::Device(at::kCPU);
};

class PrefetchLoader {
 public:
  /// Starts the workers, which begin fetching at once. `data` must outlive the loader. Throws baton::Error for
  /// negative workers or prefetch < workers.
  PrefetchLoader(const Dataset& data, BatchPlan plan, PrefetchOptions options);
  /// Stops the workers: no new get starts; the gets in progress (at most `workers`) are waited for.
  ~PrefetchLoader();
  PrefetchLoader(const PrefetchLoader&) = delete;
  PrefetchLoader& operator=(const PrefetchLoader&) = delete;

  /// The next batch of the plan, on the CPU (pinned for a CUDA device), waiting for it if it is not ready yet.
  /// A get that threw is rethrown here, at the batch it was for, as a baton::Error naming the dataset and the
  /// batch; the batches after it can still be taken. One consumer thread only. Throws past the plan's end.
  Batch next();
  /// The plan index of the batch next() returns.
  std::int64_t position() const;
  /// Whether every batch of the plan has been taken.
  bool done() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The batch on `device`; from pinned memory to a CUDA device the copy is non-blocking (queued on the current
/// stream, ahead of the kernels that read it). Undefined tensors (a prediction set without targets) stay so.
Batch to_device(const Batch& batch, at::Device device);

}  // namespace baton
