// An algorithm that rewrites the batch: at after_dataloader it adds Gaussian noise of standard deviation `std` to
// the training inputs, every `every`-th batch, and logs "input_noise/rms", the root mean square of what it added.
// The noise comes from a generator seeded by the run's seed and the batch count, not from the global one, so a
// run resumed from a checkpoint adds exactly the noise the uninterrupted run did.
//
//   [[plugins]]
//   path = "build/input_noise.so"
//   std = 0.1     # > 0
//   every = 1     # integer >= 1
#include <cstdint>
#include <string>

#include <ATen/ops/randn.h>

#include "baton/plugin.h"

namespace {

class InputNoise final : public baton::Algorithm {
 public:
  explicit InputNoise(const baton::PluginConfig& config)
      : std_(config.get_number_or("std", 0.1, baton::Range::above(0), "the noise's standard deviation")),
        every_(config.get_int_or("every", 1, baton::Range::at_least(1), "batches between two noised ones")) {}

  void subscribe(baton::Subscriptions& events) override {
    events.on(baton::Event::after_dataloader, this, &InputNoise::add_noise);
  }

  void declare(baton::Declarations& run) const override { run.metric("input_noise/rms"); }

  void add_noise(baton::State& state, baton::Logger& logger) {
    // At after_dataloader the batch count does not include this batch yet: batch k (0-based) is noised when
    // k % every == 0, the first batch included.
    if (state.timestamp().batch % every_ != 0) return;
    at::Tensor& inputs = state.batch.inputs();
    // The step's generator (seeded by the run's seed, the batch count and the rank): a resumed run draws the same.
    const at::Tensor noise = at::randn(inputs.sizes(), state.generator, at::TensorOptions().dtype(inputs.scalar_type()))
                                 .mul_(std_)
                                 .to(inputs.device());
    inputs = inputs.add(noise);
    logger.log_metric("input_noise/rms", noise.pow(2).mean().sqrt().item<double>());
  }

 private:
  double std_;
  std::int64_t every_;
};

}  // namespace

BATON_PLUGIN(InputNoise, "input_noise", "1.0.0", "adds Gaussian noise to the training inputs at after_dataloader")
