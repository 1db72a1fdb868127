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
#include <sstream>
#include <string>

#include <ATen/ops/randn.h>

#include "baton/plugin.h"

namespace {

std::string number_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

class InputNoise final : public baton::Algorithm {
 public:
  explicit InputNoise(const baton::PluginConfig& config)
      : std_(config.get_or<double>("std", 0.1)), every_(config.get_or<std::int64_t>("every", 1)) {
    if (!(std_ > 0)) config.fail("std", "must be > 0, got " + number_text(std_));
    if (every_ < 1) config.fail("every", "must be >= 1, got " + std::to_string(every_));
  }

  bool match(baton::Event event, const baton::State& state) override {
    // At after_dataloader the batch count does not include this batch yet: batch k (0-based) is noised when
    // k % every == 0, the first batch included.
    return event == baton::Event::after_dataloader && state.timestamp().batch % every_ == 0;
  }

  void apply(baton::Event, baton::State& state, baton::Logger& logger) override {
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
