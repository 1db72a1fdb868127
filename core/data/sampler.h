#pragma once
// Which samples make up each batch. The order of epoch e is a permutation drawn from (seed, e) alone, so any
// (epoch, batch_in_epoch) position can be reproduced exactly after a resume without saving the permutation.
// In a distributed run each rank takes its own strided share of the permutation, truncated to a multiple of
// world_size first so every rank runs the same number of batches.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>


namespace baton {

struct SamplerOptions {
  std::int64_t dataset_size = 0;
  std::int64_t batch_size = 1;
  bool shuffle = true;
  bool drop_last = false;  // drop the last, smaller batch of an epoch
  std::uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
};

class BatchSampler {
 public:
  explicit BatchSampler(SamplerOptions options);  // throws baton::Error on bad sizes
  std::int64_t batches_per_epoch() const;
  std::int64_t samples_per_epoch() const;  // this rank's: dataset_size / world_size, less the dropped last batch
  /// The permutation (or 0..N-1 without shuffle) of `epoch`, this rank's share only.
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;
  /// The indices of batch `batch_in_epoch` of `epoch` as an int64 tensor.
  at::Tensor batch_indices(std::int64_t epoch, std::int64_t batch_in_epoch) const;
  const SamplerOptions& options() const { return options_; }

 private:
  SamplerOptions options_;
  mutable std::int64_t cached_epoch_ = -1;
  mutable std::vector<std::int64_t> cached_order_;
};

}  // namespace baton
