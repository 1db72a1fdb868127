#pragma once
// What the trainer trains (Composer's model contract): a torch::nn::Module (the parameters and buffers that the
// optimizer, checkpoints, the EMA and data-parallel averaging walk, its train/eval mode, its device) together with
// how it computes outputs from a batch:
//   forward(batch) -> outputs         training (and evaluation, unless the model has an evaluation form);
//   eval_forward(batch) -> outputs    evaluation and prediction, when they compute differently (a generative
//                                     model samples; its metrics compare the samples with the batch);
//   loss(outputs, batch) -> scalar    the model's own loss, used instead of the run's configured one;
//   optimizers                        its own named optimizers (a GAN's generator and discriminator), used
//                                     instead of the run's one;
//   training_step(batch, step)        its own training step (Lightning's manual optimisation): it computes
//                                     losses, backpropagates and steps its optimizers through `step`.
// It converts implicitly from
//   - a module with `Tensor forward(Tensor)`, as a holder (torch::nn::Linear, a TORCH_MODULE of one's own) or a
//     std::shared_ptr to its Impl: it reads the batch's `inputs` and gives one output, `outputs`;
//   - a module with `forward(const baton::Batch&)` returning Outputs or a tensor;
//   - torch::nn::Sequential (each part's forward taking and returning one tensor), torch::nn::AnyModule;
// and takes (module, function) for anything else, e.g. a forward of two tensors, in one line:
//   baton::Model model(net, [net](const baton::Batch& b) mutable { return net->forward(b["x"], b["t"]); });
// baton::load_torchscript (baton/torchscript.h) makes one from a file saved by Python's torch.jit.save.
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include "baton/batch.h"
#include "baton/export.h"

namespace torch::optim {
class Optimizer;
}
namespace torch::nn {
class SequentialImpl;
}

namespace baton {

/// An optimizer under the name checkpoints and a model's training step know it by.
struct BATON_API NamedOptimizer {
  std::string name;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
};

/// What a model's own training step works with (Model::with_training_step). The trainer fires before_forward
/// before the step and after_forward … after_backward after it (with the loss it returned on State), so the
/// optimizers have stepped when those run; it steps no optimizer itself.
class BATON_API StepContext {
 public:
  virtual ~StepContext();
  /// The model's optimizer `name`; throws baton::Error naming those it has.
  virtual torch::optim::Optimizer& optimizer(const std::string& name) = 0;
  /// Backpropagates `loss` (scaled, under a precision that scales losses).
  virtual void backward(const at::Tensor& loss) = 0;
  /// The batch in microbatches of TrainerOptions::microbatch_size (whole when none is set): each one's loss from
  /// `loss_of`, weighted by its share of the batch and backpropagated, so the gradients are the whole batch's.
  /// Returns the batch's loss (the weighted sum, detached).
  virtual at::Tensor backward_in_microbatches(const Batch& batch,
                                              const std::function<at::Tensor(const Batch&)>& loss_of) = 0;
  /// One optimizer's step: its parameters' gradients averaged across data-parallel ranks, the step, then its
  /// gradients zeroed.
  virtual void step(const std::string& optimizer) = 0;
  /// Zeroes one optimizer's gradients.
  virtual void zero_grad(const std::string& optimizer) = 0;
  /// What plugins see as State::outputs from after_forward on (the step's samples, its discriminator scores).
  virtual void set_outputs(Outputs outputs) = 0;
  /// A value of this step to log as "train/<name>" beside train/loss (a GAN's d_loss and g_loss): averaged, as
  /// train/loss is, over the batches of each log_interval and over the data-parallel ranks (every rank's step must
  /// log the same names). `name` is not empty, has no '/' and is not "loss"; throws baton::Error otherwise.
  virtual void log(const std::string& name, double value) = 0;
};

/// A model's own training step: returns the loss to report (detached or not; the trainer does not backpropagate
/// it).
using TrainingStep = std::function<at::Tensor(const Batch& batch, StepContext& step)>;

/// A batch's loss: a scalar tensor from the model's outputs and the batch (its targets, a mask, weights, ...).
using LossFunction = std::function<at::Tensor(const Outputs& outputs, const Batch& batch)>;

namespace detail {
// A module type with a forward taking one tensor and returning one.
template <typename Impl, typename = void>
struct tensor_module : std::false_type {};
template <typename Impl>
struct tensor_module<Impl, std::enable_if_t<std::is_base_of_v<torch::nn::Module, Impl> &&
                                            std::is_convertible_v<decltype(std::declval<Impl&>().forward(
                                                                      std::declval<const at::Tensor&>())),
                                                                  at::Tensor>>> : std::true_type {};
// A module type with a forward taking the batch and returning outputs (or one tensor).
template <typename Impl, typename = void>
struct batch_module : std::false_type {};
template <typename Impl>
struct batch_module<Impl, std::enable_if_t<std::is_base_of_v<torch::nn::Module, Impl> &&
                                           !tensor_module<Impl>::value &&
                                           std::is_convertible_v<decltype(std::declval<Impl&>().forward(
                                                                     std::declval<const Batch&>())),
                                                                 Outputs>>> : std::true_type {};
}  // namespace detail

class BATON_API Model {
 public:
  /// One tensor in (the batch's `inputs`), one out.
  using Forward = std::function<at::Tensor(const at::Tensor&)>;
  /// The general form: the whole batch in, named outputs out (a returned tensor becomes the output `outputs`).
  using BatchForward = std::function<Outputs(const Batch&)>;

  Model() = default;
  /// `module` owns the tensors, `forward` computes the outputs (it may use anything `module` keeps alive). Throws
  /// baton::Error when either is missing.
  Model(std::shared_ptr<torch::nn::Module> module, Forward forward);
  Model(std::shared_ptr<torch::nn::Module> module, BatchForward forward);
  Model(torch::nn::AnyModule module);  // NOLINT(google-explicit-constructor): a model is what the trainer takes
  /// A Sequential runs its parts in turn, each through baton::run_unit (baton/unit.h), so zero3 gathers them one at
  /// a time. (An AnyModule holding a Sequential, likewise.)
  Model(std::shared_ptr<torch::nn::SequentialImpl> sequential);  // NOLINT(google-explicit-constructor)
  /// A holder (a TORCH_MODULE) with the forward to use, of either form.
  template <typename Impl>
  Model(const torch::nn::ModuleHolder<Impl>& holder, BatchForward forward) : Model(holder.ptr(), std::move(forward)) {}
  template <typename Impl>
  Model(const torch::nn::ModuleHolder<Impl>& holder, Forward forward) : Model(holder.ptr(), std::move(forward)) {}

  template <typename Impl, typename std::enable_if_t<detail::tensor_module<Impl>::value, int> = 0>
  Model(std::shared_ptr<Impl> module)  // NOLINT(google-explicit-constructor)
      : Model(module, Forward([module](const at::Tensor& x) -> at::Tensor { return module->forward(x); })) {}
  template <typename Impl, typename std::enable_if_t<detail::batch_module<Impl>::value, int> = 0>
  Model(std::shared_ptr<Impl> module)  // NOLINT(google-explicit-constructor)
      : Model(module, BatchForward([module](const Batch& b) -> Outputs { return module->forward(b); })) {}

  template <typename Impl, typename std::enable_if_t<detail::tensor_module<Impl>::value ||
                                                         detail::batch_module<Impl>::value,
                                                     int> = 0>
  Model(const torch::nn::ModuleHolder<Impl>& holder)  // NOLINT(google-explicit-constructor)
      : Model(holder.ptr()) {}

  /// Evaluation and prediction compute their outputs with `forward` instead of the training forward (Composer's
  /// eval_forward): a generative model samples there. Such a model logs no evaluation loss (its outputs are not
  /// what a training loss compares); its metrics compare the outputs with the batch.
  Model& with_eval_forward(BatchForward forward);
  /// The model's own loss (Composer's ComposerModel.loss), used instead of the run's: a configured loss is then an
  /// error, unless `replaceable`, when a configured one takes its place.
  Model& with_loss(LossFunction loss, bool replaceable = false);
  /// The model's own optimizers (Composer's state.optimizers), used instead of the run's one: a model of several
  /// parts trained by different rules. Checkpoints carry each.
  Model& with_optimizers(std::vector<NamedOptimizer> optimizers);
  /// The model's own training step, used instead of the trainer's forward, loss, backward and optimizer step.
  Model& with_training_step(TrainingStep step);

  /// The training forward.
  Outputs forward(const Batch& batch) const { return forward_(batch); }
  /// The main output of the training forward on a batch of `inputs` alone (the one-tensor form's convenience).
  at::Tensor forward(const at::Tensor& inputs) const;
  /// The evaluation forward: the model's own when it has one, else the training forward.
  Outputs eval_forward(const Batch& batch) const { return eval_forward_ ? eval_forward_(batch) : forward_(batch); }
  bool has_eval_forward() const { return static_cast<bool>(eval_forward_); }
  /// The model's own loss; empty when it has none.
  const LossFunction& loss() const { return loss_; }
  bool loss_replaceable() const { return loss_replaceable_; }
  const std::vector<NamedOptimizer>& optimizers() const { return optimizers_; }
  const TrainingStep& training_step() const { return training_step_; }

  torch::nn::Module& module() const { return *module_; }
  const std::shared_ptr<torch::nn::Module>& ptr() const { return module_; }
  explicit operator bool() const { return module_ != nullptr; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  BatchForward forward_;
  BatchForward eval_forward_;
  LossFunction loss_;
  bool loss_replaceable_ = false;
  std::vector<NamedOptimizer> optimizers_;
  TrainingStep training_step_;
};

}  // namespace baton
