#pragma once
// The data the trainer consumes. A Dataset has a size and hands out the batch for a list of sample indices; the
// trainer's sampler decides the indices (seeded, resumable), so a dataset only has to answer "these rows, please".
// It need not hold its samples in memory: a dataset may read them from disk (docs/data.md). TensorDataset is the
// in-memory one that programs embedding baton fill with their own tensors.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/batch.h"
#include "baton/export.h"

namespace baton {

/// One field of a dataset's batches: its name, one sample's shape and dtype, and its class count when it holds
/// class indices.
struct BATON_API FieldSpec {
  std::string name;
  std::vector<std::int64_t> shape;  // one sample's: {1, 28, 28}, {} for a scalar per sample
  at::ScalarType dtype = at::kFloat;
  std::int64_t num_classes = 0;     // > 0: class indices in [0, num_classes)
};

/// What a model and a loss need to know of the data: every field of its batches, and for the common case the
/// shape of one sample's `inputs` and `targets` and whether the targets are class indices (num_classes > 0) or
/// values to regress (num_classes == 0).
struct BATON_API DataSpec {
  std::vector<std::int64_t> input_shape;   // one sample's, e.g. {1, 28, 28} for an image or {10} for a table row
  std::vector<std::int64_t> target_shape;  // one sample's target: {} for a class index or one value, {k} for k values
  std::int64_t num_classes = 0;            // > 0: classification into [0, num_classes); 0: regression
  /// Every field, in the batches' order (inputs and targets among them when the data has them).
  std::vector<FieldSpec> fields;
  /// False for data whose fields do not include `targets` (a generative model's images).
  bool has_targets() const { return fields.empty() || field("targets") != nullptr; }

  /// The field named `name`, or null.
  const FieldSpec* field(const std::string& name) const;
  /// "inputs, targets": the field names, for messages.
  std::string field_names() const;

  bool classification() const { return num_classes > 0; }
  /// The outputs a model needs per sample: num_classes scores, or one per regressed value.
  std::int64_t output_size() const;
  /// The values in one sample's inputs (the product of input_shape): a flattening model's input width.
  std::int64_t input_size() const;
  /// "1x28x28 inputs, 10 classes" / "10 inputs, 1 regression target", for messages.
  std::string describe() const;
};

/// The spec of a field whose rows are `rows` ([N, ...]): its per-sample shape and dtype.
BATON_API FieldSpec field_spec(std::string name, const at::Tensor& rows, std::int64_t num_classes = 0);

class BATON_API Dataset {
 public:
  virtual ~Dataset();
  /// The number of samples.
  virtual std::int64_t size() const = 0;
  /// The samples `indices` (int64 [B] on the CPU, each in [0, size())) as one batch of CPU tensors, every field
  /// [B, ...] (inputs [B, input_shape...] and targets [B, target_shape...] for the common case). The loader calls
  /// it from several threads at once.
  virtual Batch get(const at::Tensor& indices) const = 0;
  virtual DataSpec spec() const = 0;

  std::string name;  // "fashion-mnist/train", "csv/eval", ...: names the dataset in messages
};

/// A dataset held in memory: inputs [N, ...] and targets [N] (int64 class indices) or [N, ...] (float32 values to
/// regress), either of which may be left undefined, and any further named fields [N, ...]. Fields keep their
/// dtypes.
struct BATON_API TensorDataset : Dataset {
  at::Tensor inputs;
  at::Tensor targets;
  Batch fields;                  // more fields, after inputs and targets in each batch
  /// Class-index targets: the number of classes. 0 (the default) infers it from the targets (the largest + 1);
  /// set it when the data may lack the highest class (a small split). A target at or above it is an error.
  std::int64_t num_classes = 0;

  /// The first defined field's leading dimension (inputs, targets, then `fields`).
  std::int64_t size() const override;
  Batch get(const at::Tensor& indices) const override;
  /// Shapes and dtypes from the tensors; floating-point targets make it a regression (num_classes 0). Throws
  /// baton::Error for a class target outside [0, num_classes).
  DataSpec spec() const override;
};

}  // namespace baton
