// The data loader against free data: the training step time of the main job's model (configs/fashion_mnist.toml:
// convnet 32-64-128, batches of 128, amp_bf16 with the channels_last plugin) on Fashion-MNIST from Debian's
// dataset-fashion-mnist, drawing its batches
//   - preloaded: every batch of the timed run gathered before the run, handed out as they are (the baseline),
//   - through the loader with its defaults (workers = 1, prefetch = 2), and with workers = 2, prefetch = 4,
//   - with workers = 0: Dataset::get in the training thread, in the step's time,
// interleaved (the order rotates each repeat) so a slow phase of the shared machine hits every configuration alike;
// each is the median of all its timed steps. Then a dataset as slow as a step (its get sleeps, as one waiting on
// storage would) with workers = 0 and with two workers: how much of that latency the loader hides.
// Last line: RESULT loader_vs_preloaded=<step time with the loader's defaults / step time on preloaded batches>
// (goal <= 1.05).
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
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
#include "data/sampler.h"

namespace {

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";
constexpr std::int64_t kBatchSize = 128;
constexpr std::int64_t kBatches = 16;  // per run
constexpr std::int64_t kUntimed = 4;   // the first steps of each run (a fresh model: oneDNN's first calls) are not timed
constexpr int kRepeats = 5;

// Every batch the timed run draws, gathered beforehand; get hands the stored batch out without a copy.
struct PreloadedDataset final : baton::Dataset {
  const baton::Dataset& source;
  std::map<std::vector<std::int64_t>, baton::Batch> batches;

  PreloadedDataset(const baton::Dataset& data, const baton::TrainerOptions& options) : source(data) {
    name = data.name + " (preloaded)";
    // The sampler the trainer builds from these options, so the keys are the index lists it will ask for.
    baton::BatchSampler sampler(
        baton::SamplerOptions{data.size(), options.batch_size, true, false, options.seed, 0, 1});
    for (std::int64_t b = 0; b < kBatches; ++b) {
      const at::Tensor indices = sampler.batch_indices(b / sampler.batches_per_epoch(), b % sampler.batches_per_epoch());
      batches[key(indices)] = data.get(indices);
    }
  }
  static std::vector<std::int64_t> key(const at::Tensor& indices) {
    const auto* p = indices.data_ptr<std::int64_t>();
    return {p, p + indices.numel()};
  }
  std::int64_t size() const override { return source.size(); }
  baton::DataSpec spec() const override { return source.spec(); }
  baton::Batch get(const at::Tensor& indices) const override { return batches.at(key(indices)); }
};

// A dataset whose every get also waits `delay`, as one reading from slow storage does (a sleep, not a busy loop:
// the wait must not take a core from the step).
struct SlowDataset final : baton::Dataset {
  const baton::Dataset& source;
  std::chrono::microseconds delay;
  SlowDataset(const baton::Dataset& data, std::chrono::microseconds wait) : source(data), delay(wait) {
    name = data.name + " (slow)";
  }
  std::int64_t size() const override { return source.size(); }
  baton::DataSpec spec() const override { return source.spec(); }
  baton::Batch get(const at::Tensor& indices) const override {
    std::this_thread::sleep_for(delay);
    return source.get(indices);
  }
};

// The time of each step after the first kUntimed, from its before_dataloader to its batch_end: the time the loop
// waits for its batch is inside.
struct StepClock final : baton::Callback {
  std::chrono::steady_clock::time_point start;
  std::vector<double> steps;  // seconds
  void before_dataloader(baton::State&, baton::Logger&) override { start = std::chrono::steady_clock::now(); }
  void batch_end(baton::State& state, baton::Logger&) override {
    if (state.timestamp().batch > kUntimed)  // counted after the batch: batch kUntimed + 1 is step kUntimed + 1
      steps.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
};

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Config {
  std::string name;
  const baton::Dataset* data;
  int workers;
  int prefetch;
  std::vector<double> runs;   // mean seconds per step of each timed run
  std::vector<double> steps;  // every timed step of every run
  double best_run() const { return *std::min_element(runs.begin(), runs.end()); }
  // The median step of all runs: on a machine shared with other work, a busy moment slows some steps of a run, and
  // the median of the pooled steps ignores them where a run's mean does not.
  double median_step() const { return median_of(steps); }
};

baton::TrainerOptions run_options(int workers, int prefetch) {
  baton::TrainerOptions options = bench::steps_only(kBatches, kBatchSize);
  options.precision = baton::Precision::amp_bf16;
  options.workers = workers;
  options.prefetch = prefetch;
  return options;
}

// One run of kBatches steps; its timed steps are added to the configuration's (when `record`).
void run(Config& config, baton::PluginLoader& loader, bool record) {
  at::manual_seed(1);
  baton::ModelSpec spec;
  spec.name = "convnet";
  spec.widths = {32, 64, 128};
  auto model = baton::make_model(spec);
  auto optimizer = std::make_shared<torch::optim::SGD>(model.ptr()->parameters(),
                                                       torch::optim::SGDOptions(0.05).momentum(0.9));
  // The trainer holds its datasets by shared_ptr; these outlive it, so the pointers own nothing.
  std::shared_ptr<const baton::Dataset> data(config.data, [](const baton::Dataset*) {});
  baton::Trainer trainer(model, optimizer, data, nullptr, run_options(config.workers, config.prefetch));
  auto plugin = loader.load(loader.resolve("channels_last"), baton::PluginConfig());
  trainer.add_plugin(plugin.id, plugin.plugin);
  auto clock = std::make_shared<StepClock>();
  trainer.add_plugin("step_clock", clock);
  trainer.fit();
  if (!record) return;
  double sum = 0;
  for (double t : clock->steps) sum += t;
  config.runs.push_back(sum / static_cast<double>(clock->steps.size()));
  config.steps.insert(config.steps.end(), clock->steps.begin(), clock->steps.end());
}

// Runs every configuration once per repeat, rotating their order, after one untimed round.
void measure(std::vector<Config>& configs, baton::PluginLoader& loader) {
  for (auto& c : configs) run(c, loader, false);  // warm-up: oneDNN primitives, allocator, page cache
  for (int r = 0; r < kRepeats; ++r) {
    std::printf("  repeat %d:", r + 1);
    for (std::size_t i = 0; i < configs.size(); ++i) {
      Config& c = configs[(i + static_cast<std::size_t>(r)) % configs.size()];
      run(c, loader, true);
      std::printf("  %s %.1f ms", c.name.c_str(), 1e3 * c.runs.back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

}  // namespace

int main() {
  // As `baton train` sets up the process (core/cli/assembly.cpp): one intra-op thread per core, freed memory kept.
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (!std::filesystem::exists(kFashionMnist)) {
    std::printf("%s is missing: install Debian's dataset-fashion-mnist\n", kFashionMnist);
    return 1;
  }
  const baton::TensorDataset fashion = baton::load_idx_dataset(kFashionMnist, true, 0, "fashion-mnist");
  const PreloadedDataset preloaded(fashion, run_options(0, 0));
  baton::LoaderOptions loader_options;
  loader_options.search_paths = {BATON_BENCH_BUILTIN_PLUGIN_DIR};
  loader_options.allow_insecure = true;  // the build folder
  baton::PluginLoader loader(loader_options);

  std::printf("convnet 32-64-128, amp_bf16 + channels_last, batch %lld on %s (%lld samples), steps %lld to %lld of "
              "each run timed, %d repeats interleaved, %d threads\n",
              static_cast<long long>(kBatchSize), fashion.name.c_str(), static_cast<long long>(fashion.size()),
              static_cast<long long>(kUntimed + 1), static_cast<long long>(kBatches), kRepeats, at::get_num_threads());
  std::vector<Config> configs{{"preloaded", &preloaded, 0, 0, {}, {}},
                              {"loader w1 p2", &fashion, 1, 2, {}, {}},
                              {"loader w2 p4", &fashion, 2, 4, {}, {}},
                              {"get in step (w0)", &fashion, 0, 0, {}, {}}};
  measure(configs, loader);
  const double base = configs[0].median_step();
  std::printf("%-18s %12s %10s %15s\n", "batches from", "median step", "best run", "median/preload");
  for (const auto& c : configs)
    std::printf("%-18s %9.2f ms %7.2f ms %15.3f\n", c.name.c_str(), 1e3 * c.median_step(), 1e3 * c.best_run(),
                c.median_step() / base);

  // A dataset whose get waits as long as a step: fetched in the step, it doubles the step time. Two workers (each
  // get takes a step's time, so one alone would only just keep pace) wait for it while the step runs.
  const auto delay = std::chrono::microseconds(static_cast<std::int64_t>(1e6 * base));
  const SlowDataset slow(fashion, delay);
  std::vector<Config> slow_configs{{"slow, w0", &slow, 0, 0, {}, {}}, {"slow, loader w2 p4", &slow, 2, 4, {}, {}}};
  measure(slow_configs, loader);
  const double synchronous = slow_configs[0].median_step(), loaded = slow_configs[1].median_step();
  std::printf("slow dataset (get sleeps %.1f ms, one step): median step with w0 %.2f ms, with the loader (w2 p4) "
              "%.2f ms, preloaded %.2f ms: the loader hides %.0f%% of the get's time\n",
              1e-3 * static_cast<double>(delay.count()), 1e3 * synchronous, 1e3 * loaded, 1e3 * base,
              100.0 * (synchronous - loaded) / (synchronous - base));
  std::printf("RESULT loader_vs_preloaded=%.4f\n", configs[1].median_step() / base);
  return 0;
}
