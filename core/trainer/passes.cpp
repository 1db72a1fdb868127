// What runs besides the trainer's own forward and backward: a model's own training step (Lightning's manual
// optimisation) through the StepContext the trainer gives it, and the passes a plugin may ask for
// (TrainingPasses): the step's gradients again, and a forward pass over the training data.
#include <c10/core/GradMode.h>

#include "baton/communicator.h"
#include "sdk/step_generator.h"
#include "trainer/data_parallel.h"
#include "trainer/module_mode.h"
#include "trainer/step_errors.h"
#include "trainer/trainer_impl.h"

namespace baton {

// What a model's own training step works with: the run's optimizers, backward, microbatches, ranks.
struct Trainer::Impl::OwnStep final : StepContext {
  explicit OwnStep(Impl& trainer) : t(trainer) {}
  torch::optim::Optimizer& optimizer(const std::string& name) override {
    for (const auto& o : t.optimizers)
      if (o.name == name) return *o.optimizer;
    throw Error("the model has no optimizer '" + name + "' (its optimizers: " + optimizer_names(t.optimizers) + ")");
  }
  void backward(const at::Tensor& loss) override { t.backward(loss); }
  at::Tensor backward_in_microbatches(const Batch& batch,
                                      const std::function<at::Tensor(const Batch&)>& loss_of) override {
    const std::int64_t n = batch.size();
    const std::int64_t size = t.options.microbatch_size;
    if (size <= 0 || size >= n) {
      const at::Tensor loss = loss_of(batch);
      t.backward(loss);
      return loss.detach();
    }
    at::Tensor total;
    for (std::int64_t begin = 0; begin < n; begin += size) {
      const std::int64_t end = std::min(n, begin + size);
      const at::Tensor weighted =
          loss_of(batch.slice(begin, end)) * (static_cast<double>(end - begin) / static_cast<double>(n));
      t.backward(weighted);
      total = total.defined() ? total + weighted.detach() : weighted.detach();
    }
    return total;
  }
  void step(const std::string& name) override {
    torch::optim::Optimizer& chosen = optimizer(name);
    std::vector<at::Tensor> parameters;
    for (const auto& group : chosen.param_groups())
      parameters.insert(parameters.end(), group.params().begin(), group.params().end());
    average_gradients(t.comm(), parameters);
    chosen.step();
    chosen.zero_grad();
  }
  void zero_grad(const std::string& name) override { optimizer(name).zero_grad(); }
  void set_outputs(Outputs outputs) override { t.state.outputs = std::move(outputs); }
  void log(const std::string& name, double value) override { t.training_log.add_step_value(name, value); }
  Impl& t;
};

// The model backpropagates and steps its optimizers itself; the events around the forward, loss and backward fire
// before and after it, with its loss.
at::Tensor Trainer::Impl::own_training_step() {
  fire(Event::before_forward);
  OwnStep step(*this);
  const at::Tensor loss =
      detail::during_step([this] { return step_where(); }, "the model's training step", state.batch,
                          [this] { return train->spec(); }, [&] { return model.training_step()(state.batch, step); });
  if (!loss.defined() || loss.numel() != 1)
    throw Error("the model's training step must return its loss as one value, got " +
                (loss.defined() ? std::to_string(loss.numel()) + " values" : std::string("none")));
  state.loss = loss.detach().reshape({});
  fire(Event::after_forward);
  fire(Event::before_loss);
  fire(Event::after_loss);
  fire(Event::before_backward);
  fire(Event::after_backward);
  return state.loss;
}

bool Trainer::Impl::Passes::recompute_gradients() {
  if (step_batch == nullptr)
    throw Error(t.model.training_step()
                    ? "recompute_gradients: the model trains by its own training_step, which the trainer cannot run "
                      "again"
                    : "recompute_gradients is only available at after_train_batch");
  // The events of the pass may not recompute in turn; State keeps the first pass's data for the rest of the step.
  const Batch* from = std::exchange(step_batch, nullptr);
  Batch batch = std::move(t.state.batch);
  Outputs outputs = std::move(t.state.outputs);
  at::Tensor loss = std::move(t.state.loss);
  t.zero_gradients();
  t.state.batch = *from;
  {
    // The same draws as the first pass (a diffusion model's timesteps and noise): the same loss function.
    StepGeneratorScope again(t.state, StepStream::train, static_cast<std::uint64_t>(t.state.progress.now.batch));
    t.forward_backward();
  }
  t.step_overflow = t.reduce_gradients();
  t.state.batch = std::move(batch);
  t.state.outputs = std::move(outputs);
  t.state.loss = std::move(loss);
  step_batch = from;
  return !t.step_overflow;
}

void Trainer::Impl::Passes::forward_training_data() {
  if (!t.fitting || t.in_step)
    throw Error("forward_training_data is only available during fit, outside a training step (from batch_end on)");
  ModuleModeScope train_mode(*t.module, /*training=*/true);
  const std::int64_t batches = t.sampler.batches_per_epoch();
  {
    c10::NoGradGuard no_grad;
    PrefetchLoader loader(*t.train, sampler_plan(t.sampler, t.state.progress.now.epoch, 0, batches),
                          loader_options(t.options, t.device));
    for (std::int64_t i = 0; i < batches; ++i) {
      const Batch batch = to_device(loader.next(), t.device);
      StepGeneratorScope random(t.state, StepStream::training_data, static_cast<std::uint64_t>(i));
      AutocastScope autocast(t.precision, t.device.type());
      detail::during_step([&] { return "a pass over the training data, batch " + std::to_string(i + 1); },
                          "the model's forward", batch, [this] { return t.train->spec(); },
                          [&] { return t.model.forward(batch); });
    }
    if (t.comm()) {
      std::vector<at::Tensor> buffers;
      for (const auto& b : t.module->buffers())
        if (b.is_floating_point()) buffers.push_back(b);
      if (!buffers.empty()) t.comm()->average(buffers);
    }
  }
}

}  // namespace baton
