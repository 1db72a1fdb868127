// Mixed precision and channels-last on the convnet: the training step time of the trainer (convnet 32-64, the main
// job's model, batches of 128 on 1x28x28 images) in fp32, with channels_last alone, with amp_bf16 alone, and with
// both, in one process, interleaved so a slow phase of the machine hits every configuration alike; the best of
// several repeats of each. channels_last is the built-in plugin, loaded from the build's plugin folder as `baton
// train` loads it; precision is TrainerOptions::precision, as `trainer.precision` sets it.
// Last line: RESULT amp_cl_vs_fp32=<step time with amp_bf16 + channels_last / step time in fp32>  (goal <= 0.30)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/optim/sgd.h>

#include "baton/builtin_datasets.h"
#include "baton/models.h"
#include "baton/plugin_loader.h"
#include "baton/trainer.h"
#include "bench_trainer_options.h"

namespace {

constexpr std::int64_t kBatchSize = 128;
constexpr std::int64_t kBatches = 16;   // per run
constexpr std::int64_t kUntimed = 3;    // the first steps of each run (a fresh model: oneDNN's first calls) are not timed
constexpr int kRepeats = 5;

struct Config {
  const char* name;
  bool channels_last;
  baton::Precision precision;
  double best = 1e30;  // seconds per step
  std::string why;     // the trainer's reason for its precision: whether this CPU computes bfloat16 natively
};

// Times the steps after the first kUntimed: the steady state a long run lives in.
struct StepClock final : baton::Callback {
  std::chrono::steady_clock::time_point start, end;
  void batch_start(baton::State& state, baton::Logger&) override {
    if (state.timestamp().batch == kUntimed) start = std::chrono::steady_clock::now();
  }
  void batch_end(baton::State&, baton::Logger&) override { end = std::chrono::steady_clock::now(); }
};

double seconds_per_step(const baton::TensorDataset& data, Config& config, baton::PluginLoader& loader) {
  at::manual_seed(1);
  baton::ModelSpec spec;
  spec.name = "convnet";
  spec.widths = {32, 64};
  auto model = baton::make_model(spec);
  auto optimizer = std::make_shared<torch::optim::SGD>(model.ptr()->parameters(),
                                                       torch::optim::SGDOptions(0.05).momentum(0.9));
  baton::TrainerOptions options = bench::steps_only(kBatches, kBatchSize);
  options.precision = config.precision;
  baton::Trainer trainer(model, optimizer, data, baton::TensorDataset{}, options);
  config.why = trainer.precision().why;
  if (config.channels_last) {
    auto plugin = loader.load(loader.resolve("channels_last"), baton::PluginConfig());
    trainer.add_plugin(plugin.id, plugin.plugin);
  }
  auto clock = std::make_shared<StepClock>();
  trainer.add_plugin("step_clock", clock);
  trainer.fit();
  return std::chrono::duration<double>(clock->end - clock->start).count() / static_cast<double>(kBatches - kUntimed);
}

}  // namespace

int main() {
  // As `baton train` does with trainer.threads = 0 (one thread per core); LibTorch's own default can be one.
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  baton::TensorDataset data = baton::make_synthetic_dataset(kBatchSize * kBatches, 9);
  baton::LoaderOptions loader_options;
  loader_options.search_paths = {BATON_BENCH_BUILTIN_PLUGIN_DIR};
  loader_options.allow_insecure = true;  // the build folder
  baton::PluginLoader loader(loader_options);
  using baton::Precision;
  std::vector<Config> configs{{"fp32", false, Precision::fp32},
                              {"channels_last", true, Precision::fp32},
                              {"amp_bf16", false, Precision::amp_bf16},
                              {"amp_bf16 + channels_last", true, Precision::amp_bf16}};
  std::printf("convnet 32-64, batch %lld, steps %lld to %lld of each run timed, best of %d, %d threads\n",
              static_cast<long long>(kBatchSize), static_cast<long long>(kUntimed + 1),
              static_cast<long long>(kBatches), kRepeats, at::get_num_threads());
  for (auto& c : configs) seconds_per_step(data, c, loader);  // warm-up: oneDNN primitives, allocator
  // Which case this run measures: native bfloat16 (the goal's case) or emulated (amp slower than fp32).
  std::printf("amp_bf16 here: %s\n", configs[2].why.c_str());
  for (int r = 0; r < kRepeats; ++r) {
    std::printf("  repeat %d:", r + 1);
    // Rotate the order each repeat.
    for (std::size_t i = 0; i < configs.size(); ++i) {
      Config& c = configs[(i + static_cast<std::size_t>(r)) % configs.size()];
      const double t = seconds_per_step(data, c, loader);
      c.best = std::min(c.best, t);
      std::printf("  %s %.1f ms", c.name, 1e3 * t);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  for (const auto& c : configs)
    std::printf("%-26s %7.1f ms/step  %.3f of fp32\n", c.name, 1e3 * c.best, c.best / configs[0].best);
  std::printf("RESULT amp_cl_vs_fp32=%.4f\n", configs[3].best / configs[0].best);
  return 0;
}
