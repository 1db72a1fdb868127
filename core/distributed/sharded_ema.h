#pragma once
// A sharded exponential moving average for data-parallel runs: every rank holds the full, identical weights, so each
// keeps the EMA of its own contiguous 1/W slice of the flattened floating-point parameters and buffers only, and
// updates it with no communication at all. The full EMA is gathered (one allgather) only when it is needed whole:
// evaluation with EMA weights, checkpoints, exports. A full EMA from a checkpoint written at any world size is
// re-split by load_full. The EMA is kept in fp32; integer buffers are not averaged (they are not part of it).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/export.h"

namespace torch::nn {
class Module;
}

namespace baton {

class Communicator;

class BATON_API ShardedEma {
 public:
  /// This rank's slice, initialised from the model's weights. `comm` null: a single rank keeps everything.
  ShardedEma(const torch::nn::Module& model, std::shared_ptr<Communicator> comm, double smoothing);
  ~ShardedEma();
  ShardedEma(const ShardedEma&) = delete;
  ShardedEma& operator=(const ShardedEma&) = delete;

  /// ema <- s * ema + (1 - s) * w on this rank's slice; no collective.
  void update(const torch::nn::Module& model);
  void update(const torch::nn::Module& model, double smoothing);

  /// Collective (every rank must call it): the full EMA under the model's names, fp32, in the model's shapes.
  std::vector<std::pair<std::string, at::Tensor>> gather() const;
  /// Takes this rank's slice of a full EMA (as gather returns it, from any world size). Throws Error naming a
  /// missing tensor or one whose size differs.
  void load_full(const std::vector<std::pair<std::string, at::Tensor>>& state);

  std::int64_t total_elements() const;  // of the full EMA
  std::int64_t shard_begin() const;     // this rank's slice of the flattened EMA: [begin, end)
  std::int64_t shard_end() const;
  std::int64_t bytes() const;       // held by this rank
  std::int64_t full_bytes() const;  // of the full EMA
  double smoothing() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
