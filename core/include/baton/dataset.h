#pragma once
// The data the trainer consumes. A Dataset has a size and hands out the batch for a list of sample indices; the
// trainer's sampler decides the indices (seeded, resumable), so a dataset only has to answer "these rows, please".
// It need not hold its samples in memory: a dataset may read them from disk (docs/data.md). TensorDataset is the
// in-memory one that programs embedding baton fill with their own tensors.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/export.h"

namespace baton {

/// What a model and a loss need to know of the data: the shape of one sample's input and target, and whether the
/// targets are class indices (num_classes > 0) or values to regress (num_classes == 0).
struct BATON_API DataSpec {
  std::vector<std::int64_t> input_shape;   // one sample's, e.g. {1, 28, 28} for an image or {10} for a table row
  std::vector<std::int64_t> target_shape;  // one sample's target: {} for a class index or one value, {k} for k values
  std::int64_t num_classes = 0;            // > 0: classification into [0, num_classes); 0: regression

  bool classification() const { return num_classes > 0; }
  /// The outputs a model needs per sample: num_classes scores, or one per regressed value.
  std::int64_t output_size() const;
  /// "1x28x28 inputs, 10 classes" / "10 inputs, 1 regression target", for messages.
  std::string describe() const;
};

struct BATON_API Batch {
  at::Tensor inputs;
  at::Tensor targets;
  std::int64_t size() const { return targets.defined() ? targets.size(0) : (inputs.defined() ? inputs.size(0) : 0); }
};

class BATON_API Dataset {
 public:
  virtual ~Dataset();
  /// The number of samples.
  virtual std::int64_t size() const = 0;
  /// The samples `indices` (int64 [B] on the CPU, each in [0, size())) as one batch of CPU tensors, inputs
  /// [B, input_shape...] and targets [B, target_shape...]. The loader calls it from several threads at once.
  virtual Batch get(const at::Tensor& indices) const = 0;
  virtual DataSpec spec() const = 0;

  std::string name;  // "fashion-mnist/train", "csv/eval", ...: names the dataset in messages
};

/// A dataset held in memory: inputs [N, ...] (float32) and targets [N] (int64 class indices) or [N, ...]
/// (float32 values to regress).
struct BATON_API TensorDataset : Dataset {
  at::Tensor inputs;
  at::Tensor targets;
  std::int64_t num_classes = 10;  // used when the targets are class indices

  std::int64_t size() const override { return targets.defined() ? targets.size(0) : 0; }
  Batch get(const at::Tensor& indices) const override;
  /// Shapes from the tensors; floating-point targets make it a regression (num_classes 0).
  DataSpec spec() const override;
};

}  // namespace baton
