#include "baton_test.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "algorithm_test_support.h"
#include "baton/builtin_datasets.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace progressive_resizing_test {

using namespace algorithm_test;

namespace {

// A batch of n images [1, side, side] whose pixel values are their own index (n * side^2 + h * side + w), so a
// pixel of the result says where it came from.
baton::Batch numbered_batch(std::int64_t n, std::int64_t side) {
  return baton::Batch::of(at::arange(n * side * side).to(at::kFloat).reshape({n, 1, side, side}), at::zeros({n}, at::kLong));
}

// Runs the plugin once at after_dataloader with `done` of 100 batches behind; returns the inputs it left.
at::Tensor resized_at(baton::Algorithm& algorithm, std::int64_t done, std::int64_t side = 28,
                      RecordingLogger* logger = nullptr) {
  RecordingLogger own;
  baton::State state;
  state.progress.max_duration = Time(100, TimeUnit::batch);
  state.progress.now.batch = done;
  state.batch = numbered_batch(2, side);
  baton::run_subscribed(algorithm, Event::after_dataloader, state, logger ? *logger : own);
  return state.batch.inputs();
}

// Global average pooling before the classifier: takes images of any size.
struct PoolNetImpl : torch::nn::Module {
  PoolNetImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(4, 10))) {}
  at::Tensor forward(const at::Tensor& x) { return fc->forward(conv->forward(x).relu().mean({2, 3})); }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
};
TORCH_MODULE(PoolNet);

struct SizeProbe : baton::Callback {
  std::map<std::int64_t, std::int64_t> side_at;  // batch index -> the side the model saw
  void before_forward(baton::State& s, baton::Logger&) override {
    CHECK(s.batch.inputs().size(2) == s.batch.inputs().size(3));
    side_at[s.timestamp().batch] = s.batch.inputs().size(3);
  }
};

}  // namespace

TEST_SUITE("progressive_resizing_plugin") {
  TEST_CASE("the size follows Composer's schedule with the default keys") {
    // initial 0.5, delay 0.5, finetune 0.2, increment 4, on 28 x 28:
    //   ramp = clamp((f - 0.5) / 0.3, 0, 1), scale = 0.5 + 0.5 ramp, side = round(28 scale / 4) * 4
    //   f = 0, 0.5:  scale 0.5,    28 * 0.5 / 4 = 3.5    -> 4 (half to even) -> 16
    //   f = 0.55:    scale 0.5833, 4.083 -> 4 -> 16
    //   f = 0.6:     scale 0.6667, 4.667 -> 5 -> 20
    //   f = 0.65:    scale 0.75,   5.25  -> 5 -> 20
    //   f = 0.7:     scale 0.8333, 5.833 -> 6 -> 24
    //   f = 0.8, 0.95: scale 1 -> full size, unchanged
    auto plugin = load("", "progressive_resizing");
    auto& algorithm = dynamic_cast<baton::Algorithm&>(*plugin.plugin);
    const std::map<std::int64_t, std::int64_t> expected = {{0, 16},  {50, 16}, {55, 16}, {60, 20},
                                                           {65, 20}, {70, 24}, {80, 28}, {95, 28}};
    for (const auto& [done, side] : expected) {
      CAPTURE(done);
      RecordingLogger logger;
      const at::Tensor out = resized_at(algorithm, done, 28, &logger);
      CHECK(out.size(0) == 2);
      CHECK(out.size(1) == 1);
      CHECK(out.size(2) == side);
      CHECK(out.size(3) == side);
      CHECK(logger.last("progressive_resizing/width") == side);
      CHECK(logger.last("progressive_resizing/height") == side);
    }
  }

  TEST_CASE("the width is pinned with Python's round, half to even") {
    // 20 x 20 at scale 0.5: 20 * 0.5 / 4 = 2.5 rounds to 2 (not 3): 8 x 8.
    auto plugin = load("", "progressive_resizing");
    CHECK(resized_at(dynamic_cast<baton::Algorithm&>(*plugin.plugin), 0, 20).size(3) == 8);
    // Other keys: initial 0.25, no delay, no finetune, increment 1 on 28: f = 0.5 -> scale 0.625 -> 17.5 -> 18.
    auto other = load("initial_scale = 0.25\ndelay_fraction = 0.0\nfinetune_fraction = 0.0\nsize_increment = 1",
                      "progressive_resizing");
    CHECK(resized_at(dynamic_cast<baton::Algorithm&>(*other.plugin), 50).size(3) == 18);
    // A ramp of length 0 (delay + finetune = 1) is a step to full size at the delay.
    auto step = load("delay_fraction = 0.6\nfinetune_fraction = 0.4", "progressive_resizing");
    CHECK(resized_at(dynamic_cast<baton::Algorithm&>(*step.plugin), 59).size(3) == 16);
    CHECK(resized_at(dynamic_cast<baton::Algorithm&>(*step.plugin), 60).size(3) == 28);
  }

  TEST_CASE("resize takes the nearest pixel: out[i][j] = in[floor(i * 28 / 16)][floor(j * 28 / 16)]") {
    auto plugin = load("mode = \"resize\"", "progressive_resizing");
    const std::vector<double> out = values_of(resized_at(dynamic_cast<baton::Algorithm&>(*plugin.plugin), 0));
    REQUIRE(out.size() == 2 * 16 * 16);
    int wrong = 0;
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) {
          const double want = n * 784 + std::floor(i * 1.75) * 28 + std::floor(j * 1.75);
          wrong += out[static_cast<std::size_t>(n * 256 + i * 16 + j)] != want;
        }
    CHECK(wrong == 0);
  }

  TEST_CASE("crop takes one window of int(28 * scale) for the whole batch, at an offset drawn per batch") {
    auto plugin = load("mode = \"crop\"", "progressive_resizing");
    auto& algorithm = dynamic_cast<baton::Algorithm&>(*plugin.plugin);
    std::set<std::pair<std::int64_t, std::int64_t>> offsets;
    for (std::int64_t done = 0; done < 10; ++done) {
      const std::vector<double> out = values_of(resized_at(algorithm, done));
      REQUIRE(out.size() == 2 * 16 * 16);
      const auto first = static_cast<std::int64_t>(out[0]);
      const std::int64_t top = first / 28, left = first % 28;
      CHECK(top + 16 <= 28);
      CHECK(left + 16 <= 28);
      int wrong = 0;
      for (int n = 0; n < 2; ++n)
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < 16; ++j)
            wrong += out[static_cast<std::size_t>(n * 256 + i * 16 + j)] != n * 784 + (top + i) * 28 + (left + j);
      CHECK(wrong == 0);
      offsets.insert({top, left});
    }
    CHECK(offsets.size() > 3);
  }

  TEST_CASE("in a run, a model with global pooling sees the scheduled sizes batch by batch") {
    at::manual_seed(5);
    PoolNet model;
    auto optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05));
    auto options = quiet_options();
    options.max_duration = Time(10, TimeUnit::batch);
    options.eval_interval = Time(0, TimeUnit::epoch);
    options.save_interval = Time(0, TimeUnit::epoch);
    baton::Trainer trainer(torch::nn::AnyModule(model), optimizer, baton::make_synthetic_dataset(96, 7),
                           baton::make_synthetic_dataset(50, 8), options);
    auto probe = std::make_shared<SizeProbe>();
    trainer.add_plugin("progressive_resizing", load("", "progressive_resizing").plugin);
    trainer.add_plugin("probe", probe);
    trainer.fit();
    // Batch k starts with k / 10 of the run done: 0 .. 0.5 -> 16, 0.6 -> 20, 0.7 -> 24, 0.8 and 0.9 -> 28.
    const std::map<std::int64_t, std::int64_t> expected = {{0, 16}, {1, 16}, {2, 16}, {3, 16}, {4, 16},
                                                           {5, 16}, {6, 20}, {7, 24}, {8, 28}, {9, 28}};
    CHECK(probe->side_at == expected);
  }

  TEST_CASE("bad keys are configuration errors at their line") {
    const std::string mode = config_error("initial_scale = 0.5\nmode = \"squash\"", "progressive_resizing");
    CHECK(contains(mode, "run.toml:2"));
    CHECK(contains(mode, "plugins.progressive_resizing.mode: must be \"resize\" or \"crop\", got \"squash\""));
    CHECK(contains(config_error("initial_scale = 1.5", "progressive_resizing"),
                   "plugins.progressive_resizing.initial_scale: must be in [0, 1], got 1.5"));
    CHECK(contains(config_error("delay_fraction = 0.6\nfinetune_fraction = 0.5", "progressive_resizing"),
                   "delay_fraction + finetune_fraction must be <= 1, got 0.6 + 0.5"));
    CHECK(contains(config_error("size_increment = 0", "progressive_resizing"),
                   "plugins.progressive_resizing.size_increment: must be an integer >= 1, got 0"));
    CHECK(contains(config_error("size_increment = 2.5", "progressive_resizing"), "plugins.progressive_resizing.size_increment"));
    CHECK(contains(config_error("resize_targets = true", "progressive_resizing"), "unknown key 'resize_targets'"));
  }
}

}  // namespace progressive_resizing_test
