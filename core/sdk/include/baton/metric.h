#pragma once
// An evaluation metric (Metric, and TensorMetric for one output against one batch field) and the field keys losses
// and metrics read: what a metric's author implements and registers (baton/components.h registers it).
#include <string>
#include <vector>

#include "baton/batch.h"
#include "baton/export.h"
#include "baton/plugin_config.h"

namespace baton {

/// Which output and which batch field a loss or metric of one tensor against another compares (Composer's
/// `input_key`/`target_key` idea): the built-in losses and metrics read them from their config tables as `output`
/// (default: the model's main output) and `target` (default "targets").
struct BATON_API FieldKeys {
  std::string output;               // empty: Outputs::main()
  std::string target = "targets";

  const at::Tensor& output_of(const Outputs& outputs) const;
  const at::Tensor& target_of(const Batch& batch) const;
  /// Reads the keys `output` and `target` of a component's config table.
  static FieldKeys from(const PluginConfig& config);
};

/// An evaluation metric kept as running sums, so that data-parallel ranks combine exactly: the evaluator adds
/// every rank's sums() element-wise and hands the totals to compute() (a mean of ranks' means would weigh a rank
/// with fewer samples wrongly, and an R² or F1 is no mean at all).
class BATON_API Metric {
 public:
  virtual ~Metric();
  /// Adds one batch: the outputs as the model gave them (its evaluation form's) and the batch as the dataset gave
  /// it (targets as class indices, class probabilities after label smoothing or MixUp, or values), on the model's
  /// device.
  virtual void update(const Outputs& outputs, const Batch& batch) = 0;
  /// The running sums; always the same number of them.
  virtual std::vector<double> sums() const = 0;
  /// The metric from sums (this rank's, or every rank's added up).
  virtual double compute(const std::vector<double>& sums) const = 0;
  virtual void reset() = 0;
  /// Larger is better (accuracy, r2) or smaller is (mae, rmse): what checkpoint selection and stoppers assume.
  virtual bool higher_is_better() const = 0;
};

/// A metric of one output against one batch field (FieldKeys): implement update_tensors. The built-ins are these.
class BATON_API TensorMetric : public Metric {
 public:
  ~TensorMetric() override;
  void update(const Outputs& outputs, const Batch& batch) final;
  /// One batch's output (keys.output) against its field (keys.target).
  virtual void update_tensors(const at::Tensor& outputs, const at::Tensor& targets) = 0;

  FieldKeys keys;
};

}  // namespace baton
