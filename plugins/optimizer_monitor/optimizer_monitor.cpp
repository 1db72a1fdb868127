// optimizer_monitor: the L2 norms of the training step (Composer's OptimizerMonitor), logged at batch_end into that
// batch's line every `interval` batches (docs/algorithms.md):
//   l2_norm/grad/global, l2_norm/grad/<parameter>    the gradients the optimizer steps with (as after_train_batch
//                                                    leaves them: averaged across ranks, unscaled, clipped)
//   l2_norm/param/global, l2_norm/param/<parameter>  the weights after the step
//   l2_norm/update/global, l2_norm/update/<parameter>  the step itself, ‖w_after − w_before‖
// <parameter> is the model's parameter name ("0.weight"); per_layer = false logs the global norms only. A global
// norm is the norm of all the parameters' values as one vector. A parameter without a gradient counts as zero. A
// model with its own training step (Model::with_training_step) steps before after_train_batch, so its update reads 0.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/sub.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "baton/plugin.h"

namespace {

// The 2-norm of a tensor in double precision, whatever its dtype and device.
double norm_of(const at::Tensor& t) { return at::linalg_vector_norm(t.detach().to(at::kDouble), 2).item<double>(); }

class OptimizerMonitor final : public baton::Callback {
 public:
  explicit OptimizerMonitor(const baton::PluginConfig& config)
      : interval_(config.get_int_or("interval", 1, baton::Range::at_least(1))),
        per_layer_(config.get_or<bool>("per_layer", true)) {}

  // Declared before the model is built, so a stopper may watch "l2_norm/grad/global"; the per-layer names are the
  // model's parameters', declared as a family.
  void declare(baton::Declarations& run) const override {
    for (const char* kind : {"grad", "param", "update"}) {
      run.metric(std::string("l2_norm/") + kind + "/global");
      if (per_layer_) run.metric_family(std::string("l2_norm/") + kind + "/");
    }
    // Sharded, the model's .grad after the reduce is the rank's own (zero1) or gone (zero2).
    run.replicated_only("reads the model's gradients after the reduce");
  }

  void init(baton::State& state, baton::Logger&) override {
    names_.clear();
    if (state.facts.model() != nullptr)
      for (const auto& item : state.facts.model()->named_parameters(/*recurse=*/true))
        if (item.value().requires_grad()) names_.push_back(item.key());
  }

  // The step's gradients are final here; the optimizer steps after this event, so the weights are kept to measure
  // the update at batch_end.
  void after_train_batch(baton::State& state, baton::Logger&) override {
    // The timestamp counts this batch only after the step: it is batch number batch + 1.
    due_ = state.facts.model() != nullptr && ((state.timestamp().batch + 1) % interval_ == 0);
    if (!due_) return;
    c10::NoGradGuard no_grad;
    grads_.clear();
    before_.clear();
    for (const auto& parameter : trainable(state)) {
      const at::Tensor& grad = parameter.grad();
      grads_.push_back(grad.defined() ? norm_of(grad) : 0.0);
      before_.push_back(parameter.detach().clone());
    }
  }

  void batch_end(baton::State& state, baton::Logger& logger) override {
    if (!due_) return;
    due_ = false;
    c10::NoGradGuard no_grad;
    const std::vector<at::Tensor> parameters = trainable(state);
    std::vector<double> params, updates;
    for (std::size_t i = 0; i < parameters.size() && i < before_.size(); ++i) {
      params.push_back(norm_of(parameters[i]));
      updates.push_back(norm_of(at::sub(parameters[i].detach(), before_[i])));
    }
    before_.clear();
    log(logger, "grad", grads_);
    log(logger, "param", params);
    log(logger, "update", updates);
  }

 private:
  std::vector<at::Tensor> trainable(const baton::State& state) const {
    std::vector<at::Tensor> out;
    for (const auto& item : state.facts.model()->named_parameters(/*recurse=*/true))
      if (item.value().requires_grad()) out.push_back(item.value());
    return out;
  }

  void log(baton::Logger& logger, const std::string& kind, const std::vector<double>& norms) const {
    double squares = 0;
    for (double n : norms) squares += n * n;
    logger.log_metric("l2_norm/" + kind + "/global", std::sqrt(squares));
    if (!per_layer_) return;
    for (std::size_t i = 0; i < norms.size() && i < names_.size(); ++i)
      logger.log_metric("l2_norm/" + kind + "/" + names_[i], norms[i]);
  }

  std::int64_t interval_;
  bool per_layer_;
  std::vector<std::string> names_;  // the trainable parameters', in the model's order
  bool due_ = false;                // this batch is measured
  std::vector<double> grads_;
  std::vector<at::Tensor> before_;  // the weights before the step
};

}  // namespace

BATON_PLUGIN(OptimizerMonitor, "optimizer_monitor", "1.0.0",
             "logs the L2 norms of gradients, weights and each step's update, globally and per parameter")
