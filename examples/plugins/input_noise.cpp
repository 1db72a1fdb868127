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

#include <ATen/CPUGeneratorImpl.h>
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
    const at::Tensor& inputs = state.batch.inputs;
    // A fresh generator per batch; odd multiplier so neighbouring (seed, batch) pairs do not collide.
    at::Generator generator = at::detail::createCPUGenerator(
        state.seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(state.timestamp().batch) * 1000003ULL +
        static_cast<std::uint64_t>(state.rank));
    const at::Tensor noise =
        at::randn(inputs.sizes(), generator, at::TensorOptions().dtype(inputs.scalar_type())).mul_(std_).to(inputs.device());
    state.batch.inputs = inputs.add(noise);
    logger.log_metric("input_noise/rms", noise.pow(2).mean().sqrt().item<double>());
  }

 private:
  double std_;
  std::int64_t every_;
};

}  // namespace

BATON_PLUGIN(InputNoise, "input_noise", "1.0.0", "adds Gaussian noise to the training inputs at after_dataloader")
