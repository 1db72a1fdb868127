// The built-in evaluation metrics: accuracy, top_k and f1 for class targets; mae, rmse and r2 for values. Each keeps
// running sums (doubles) so that data-parallel ranks add their sums element-wise and compute() gives the metric over
// all samples exactly; nothing here is a mean of per-batch or per-rank means. Outputs and targets arrive on the
// model's device; what update() needs is copied to the CPU as float64 (a copy per batch of the targets' size, or of
// the predictions' for classes).
#include <ATen/core/Tensor.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/round.h>
#include <ATen/ops/topk.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "baton/text.h"
#include "baton/components.h"
#include "baton/error.h"
#include "components/builtins.h"
#include "metrics/outputs.h"

namespace baton {
namespace {

using metrics_detail::fit_outputs;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();


/// A contiguous CPU copy (or the tensor itself when it is one already) of type `type`, detached from autograd.
at::Tensor cpu(const at::Tensor& t, at::ScalarType type) {
  return t.detach().to(at::kCPU, type).contiguous();
}

/// The predicted class of each sample, int64 [N] on the CPU: the argmax of scores [N, C], or for a single logit
/// per sample ([N] or [N, 1], a binary classifier) class 1 where the logit is > 0.
at::Tensor predicted_classes(const std::string& metric, const at::Tensor& outputs) {
  if (outputs.dim() == 2 && outputs.size(1) > 1) return cpu(outputs.detach().argmax(1), at::kLong);
  if (outputs.dim() == 1 || (outputs.dim() == 2 && outputs.size(1) == 1))
    return cpu(outputs.detach().reshape({-1}).gt(0), at::kLong);
  throw Error(metric + ": expected outputs [N, classes] (or one logit per sample, [N] or [N, 1]), got shape " +
              format_shape(outputs.sizes()));
}

/// The true class of each of `n` samples, int64 [N] on the CPU: class indices as they are, the argmax of class
/// probabilities [N, C] (after label smoothing or MixUp), and 0/1 floats (a binary target) rounded.
at::Tensor target_classes(const std::string& metric, const at::Tensor& targets, std::int64_t n) {
  const bool floating = at::isFloatingType(targets.scalar_type());
  if (floating && targets.dim() == 2 && targets.size(1) > 1 && targets.size(0) == n)
    return cpu(targets.detach().argmax(1), at::kLong);
  if (targets.dim() >= 1 && targets.size(0) == n && targets.numel() == n) {
    const at::Tensor flat = targets.detach().reshape({n});
    return cpu(floating ? at::round(flat) : flat, at::kLong);
  }
  throw Error(metric + ": targets of shape " + format_shape(targets.sizes()) + " do not fit " + std::to_string(n) +
              " predictions (expected class indices [N] or class probabilities [N, C])");
}

/// The common part: a fixed number of sums, zeroed by reset().
class SumsMetric : public TensorMetric {
 public:
  SumsMetric(std::string name, std::size_t count, bool higher_is_better)
      : name_(std::move(name)), sums_(count, 0.0), higher_(higher_is_better) {}
  std::vector<double> sums() const override { return sums_; }
  void reset() override { std::fill(sums_.begin(), sums_.end(), 0.0); }
  bool higher_is_better() const override { return higher_; }

 protected:
  void check(const std::vector<double>& sums) const {
    if (sums.size() != sums_.size())
      throw Error(name_ + ": expected " + std::to_string(sums_.size()) + " sums, got " + std::to_string(sums.size()));
  }
  std::string name_;
  std::vector<double> sums_;

 private:
  bool higher_;
};

/// Refuses data the metric has no meaning for, at the config's `name` key.
void require(const PluginConfig& config, const DataSpec& data, const std::string& metric, bool classes) {
  if (data.classification() == classes) return;
  config.fail("name", metric + (classes ? " needs class targets" : " needs regression targets") +
                          ", but the data has " + data.describe());
}

// accuracy: sums {correct, count}.
class Accuracy : public SumsMetric {
 public:
  Accuracy() : SumsMetric("accuracy", 2, true) {}
  void update_tensors(const at::Tensor& outputs, const at::Tensor& targets) override {
    const at::Tensor predicted = predicted_classes(name_, outputs);
    const at::Tensor truth = target_classes(name_, targets, predicted.size(0));
    sums_[0] += static_cast<double>(predicted.eq(truth).sum().item<std::int64_t>());
    sums_[1] += static_cast<double>(predicted.size(0));
  }
  double compute(const std::vector<double>& sums) const override {
    check(sums);
    return sums[1] > 0 ? sums[0] / sums[1] : kNaN;
  }
};

// top_k: sums {hits, count}; a hit is a sample whose class is among the k highest scores.
class TopK : public SumsMetric {
 public:
  explicit TopK(std::int64_t k) : SumsMetric("top_k", 2, true), k_(k) {}
  void update_tensors(const at::Tensor& outputs, const at::Tensor& targets) override {
    if (outputs.dim() != 2 || outputs.size(1) < k_)
      throw Error("top_k: expected outputs [N, classes] with at least k = " + std::to_string(k_) +
                  " classes, got shape " + format_shape(outputs.sizes()));
    const at::Tensor top = cpu(std::get<1>(outputs.detach().topk(k_, 1)), at::kLong);  // [N, k]
    const at::Tensor truth = target_classes(name_, targets, outputs.size(0));
    sums_[0] += static_cast<double>(top.eq(truth.unsqueeze(1)).any(1).sum().item<std::int64_t>());
    sums_[1] += static_cast<double>(outputs.size(0));
  }
  double compute(const std::vector<double>& sums) const override {
    check(sums);
    return sums[1] > 0 ? sums[0] / sums[1] : kNaN;
  }

 private:
  std::int64_t k_;
};

// mae and rmse over every target element: sums {sum of |error| or error², element count}.
class ErrorMetric : public SumsMetric {
 public:
  ErrorMetric(std::string name, bool squared) : SumsMetric(std::move(name), 2, false), squared_(squared) {}
  void update_tensors(const at::Tensor& outputs, const at::Tensor& targets) override {
    const at::Tensor error = cpu(fit_outputs(name_, outputs, targets), at::kDouble).sub(cpu(targets, at::kDouble));
    sums_[0] += (squared_ ? error.mul(error) : error.abs()).sum().item<double>();
    sums_[1] += static_cast<double>(error.numel());
  }
  double compute(const std::vector<double>& sums) const override {
    check(sums);
    if (sums[1] <= 0) return kNaN;
    return squared_ ? std::sqrt(sums[0] / sums[1]) : sums[0] / sums[1];
  }

 private:
  bool squared_;
};

// r2, the coefficient of determination as scikit-learn's r2_score(multioutput="uniform_average"): the mean over
// output columns j of R²_j = 1 - SS_res_j / SS_tot_j, with SS_tot_j = Σy² - (Σy)²/n. Sums per column j, at
// 4j..4j+3: n, Σy, Σy², Σ(y - ŷ)².
class R2 : public SumsMetric {
 public:
  explicit R2(std::int64_t columns)
      : SumsMetric("r2", 4 * static_cast<std::size_t>(columns), true), columns_(columns) {}
  void update_tensors(const at::Tensor& outputs, const at::Tensor& targets) override {
    const at::Tensor predicted = cpu(fit_outputs(name_, outputs, targets), at::kDouble);
    const at::Tensor y = cpu(targets, at::kDouble);
    const std::int64_t n = y.dim() == 0 ? 1 : y.size(0);
    if (n == 0) return;
    if (y.numel() != n * columns_)
      throw Error("r2: targets of shape " + format_shape(targets.sizes()) + " do not hold " + std::to_string(columns_) +
                  " value(s) per sample, as the data's spec says");
    const double* yv = y.data_ptr<double>();
    const double* pv = predicted.data_ptr<double>();
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < columns_; ++j) {
        const double value = yv[i * columns_ + j], residual = value - pv[i * columns_ + j];
        double* s = sums_.data() + 4 * j;
        s[0] += 1;
        s[1] += value;
        s[2] += value * value;
        s[3] += residual * residual;
      }
    }
  }
  double compute(const std::vector<double>& sums) const override {
    check(sums);
    double total = 0;
    for (std::int64_t j = 0; j < columns_; ++j) {
      const double* s = sums.data() + 4 * j;
      const double n = s[0], sum = s[1], sum_squares = s[2], residual = s[3];
      if (n < 2) return kNaN;  // scikit-learn: "R^2 score is not well-defined with less than two samples" (nan)
      double spread = sum_squares - sum * sum / n;
      // Σy² - (Σy)²/n cancels: for a constant column it leaves rounding noise, not 0. Spreads below 1e-12 of Σy²
      // are taken as a constant column (sums in float64 cannot resolve them anyway).
      if (spread <= 1e-12 * sum_squares) spread = 0;
      // scikit-learn (force_finite=True): a constant column scores 1.0 when predicted exactly, else 0.0.
      total += spread == 0 ? (residual == 0 ? 1.0 : 0.0) : 1.0 - residual / spread;
    }
    return total / static_cast<double>(columns_);
  }

 private:
  std::int64_t columns_;
};

// f1: sums per class c, at 3c..3c+2: true positives, false positives, false negatives. F1_c = 2TP / (2TP + FP + FN).
// "binary" is F1 of class 1; "macro" the unweighted mean of the classes' F1.
//
// Zero division, as scikit-learn's f1_score with its defaults (labels=None, zero_division="warn"):
// - macro averages over the classes present in the targets or the predictions (sklearn's labels=None takes
//   unique_labels(y_true, y_pred)), so a class with TP + FP + FN = 0, absent from both, is left out of the mean
//   rather than counted as 0: an evaluation split without a rare class is not punished for it.
// - binary with no positive target and no positive prediction (TP + FP + FN = 0) gives 0.0, as sklearn's
//   zero_division="warn" does.
// - no samples at all: NaN.
class F1 : public SumsMetric {
 public:
  F1(std::int64_t classes, bool binary)
      : SumsMetric("f1", 3 * static_cast<std::size_t>(classes), true), classes_(classes), binary_(binary) {}
  void update_tensors(const at::Tensor& outputs, const at::Tensor& targets) override {
    const bool single_logit = outputs.dim() == 1 || (outputs.dim() == 2 && outputs.size(1) == 1);
    if (single_logit ? classes_ != 2 : (outputs.dim() != 2 || outputs.size(1) != classes_))
      throw Error("f1: outputs of shape " + format_shape(outputs.sizes()) + " do not give " + std::to_string(classes_) +
                  " class scores per sample (or one logit, for 2 classes)");
    const at::Tensor predicted = predicted_classes(name_, outputs);
    const at::Tensor truth = target_classes(name_, targets, predicted.size(0));
    const std::int64_t* p = predicted.data_ptr<std::int64_t>();
    const std::int64_t* t = truth.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < predicted.size(0); ++i) {
      if (t[i] < 0 || t[i] >= classes_)
        throw Error("f1: target class " + std::to_string(t[i]) + " is outside [0, " + std::to_string(classes_) + ")");
      if (p[i] == t[i]) {
        sums_[3 * t[i]] += 1;  // true positive of its class
      } else {
        sums_[3 * p[i] + 1] += 1;  // a false positive of the predicted class
        sums_[3 * t[i] + 2] += 1;  // a false negative of the true one
      }
    }
  }
  double compute(const std::vector<double>& sums) const override {
    check(sums);
    const auto f1 = [&](std::int64_t c) {
      const double tp = sums[3 * c], fp = sums[3 * c + 1], fn = sums[3 * c + 2];
      return tp + fp + fn > 0 ? 2 * tp / (2 * tp + fp + fn) : 0.0;
    };
    double samples = 0;
    for (std::int64_t c = 0; c < classes_; ++c) samples += sums[3 * c] + sums[3 * c + 2];  // TP + FN: true class c
    if (samples == 0) return kNaN;
    if (binary_) return f1(1);
    double total = 0, present = 0;
    for (std::int64_t c = 0; c < classes_; ++c) {
      if (sums[3 * c] + sums[3 * c + 1] + sums[3 * c + 2] == 0) continue;
      total += f1(c);
      present += 1;
    }
    return total / present;
  }

 private:
  std::int64_t classes_;
  bool binary_;
};

// A built-in metric compares one output with one field: the keys `output` and `target` say which, and the metric
// sees the data with that field as its targets.
using TensorMetricFactory = std::function<std::unique_ptr<TensorMetric>(const PluginConfig&, const DataSpec&)>;

struct BuiltinMetrics {
  Registry<MetricFactory>& registry;
  void add(const std::string& name, const std::string& description, TensorMetricFactory factory) {
    registry.add(name, description,
                 [factory = std::move(factory)](const PluginConfig& config,
                                                const DataSpec& data) -> std::unique_ptr<Metric> {
                   auto [keys, spec] = metrics_detail::keyed_spec(config, data);
                   std::unique_ptr<TensorMetric> metric = factory(config, spec);
                   metric->keys = std::move(keys);
                   return metric;
                 });
  }
};

}  // namespace

void register_builtin_metrics(Components& components) {
  BuiltinMetrics metrics{components.metrics};
  metrics.add("accuracy", "the fraction of samples whose highest score is their class",
              [](const PluginConfig& config, const DataSpec& data) -> std::unique_ptr<TensorMetric> {
                require(config, data, "accuracy", true);
                return std::make_unique<Accuracy>();
              });
  metrics.add("top_k", "the fraction of samples whose class is among the k (key k, default 5) highest scores",
              [](const PluginConfig& config, const DataSpec& data) -> std::unique_ptr<TensorMetric> {
                const std::int64_t k = config.get_int_or("k", 5, Range::at_least(1));
                require(config, data, "top_k", true);
                // k beyond the classes would make every sample a hit (k = the class count already does): refused.
                if (k > data.num_classes)
                  config.fail("k", "k = " + std::to_string(k) + (config.has("k") ? "" : " (the default)") +
                                       " exceeds the " + std::to_string(data.num_classes) +
                                       " classes of the data; set k <= " + std::to_string(data.num_classes));
                return std::make_unique<TopK>(k);
              });
  metrics.add("f1", "F1 score of class 1 (average = \"binary\") or the mean over classes (\"macro\")",
              [](const PluginConfig& config, const DataSpec& data) -> std::unique_ptr<TensorMetric> {
                require(config, data, "f1", true);
                const std::string average =
                    config.get_choice_or("average", data.num_classes == 2 ? "binary" : "macro", {"binary", "macro"});
                if (average == "binary" && data.num_classes != 2)
                  config.fail("average", "\"binary\" needs 2 classes, but the data has " + data.describe() +
                                             "; use \"macro\"");
                return std::make_unique<F1>(data.num_classes, average == "binary");
              });
  metrics.add("mae", "mean absolute error over all target values",
              [](const PluginConfig& config, const DataSpec& data) -> std::unique_ptr<TensorMetric> {
                require(config, data, "mae", false);
                return std::make_unique<ErrorMetric>("mae", false);
              });
  metrics.add("rmse", "root mean squared error over all target values",
              [](const PluginConfig& config, const DataSpec& data) -> std::unique_ptr<TensorMetric> {
                require(config, data, "rmse", false);
                return std::make_unique<ErrorMetric>("rmse", true);
              });
  metrics.add("r2", "coefficient of determination, averaged over target columns (scikit-learn's r2_score)",
              [](const PluginConfig& config, const DataSpec& data) -> std::unique_ptr<TensorMetric> {
                require(config, data, "r2", false);
                return std::make_unique<R2>(data.output_size());
              });
}

}  // namespace baton
