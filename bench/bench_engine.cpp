// Engine overhead: the trainer with 8 no-op plugins (loaded from shared libraries, matching every event) against a
// hand-written LibTorch loop doing the same steps on the same model, data and batch order. Both are timed several
// times, interleaved, and the fastest of each is compared, so background noise hits both alike.
// Last line: RESULT engine_overhead=<trainer time / hand loop time>   (target <= 1.02)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/module.h>
#include <torch/optim/sgd.h>

#include "baton/trainer.h"
#include "config/config.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "loader/plugin_loader.h"
#include "models/models.h"

namespace {

constexpr std::int64_t kBatches = 300;
constexpr std::int64_t kBatchSize = 64;
constexpr std::uint64_t kSeed = 3;
constexpr int kRepeats = 5;

using Clock = std::chrono::steady_clock;

torch::nn::AnyModule fresh_model() {
  at::manual_seed(1);
  baton::ModelSpec spec;
  spec.name = "mlp";
  spec.widths = {512, 256};
  return baton::make_model(spec);
}

std::shared_ptr<torch::optim::SGD> fresh_optimizer(torch::nn::AnyModule& model) {
  return std::make_shared<torch::optim::SGD>(model.ptr()->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
}

double hand_loop(const baton::TensorDataset& data) {
  auto model = fresh_model();
  auto optimizer = fresh_optimizer(model);
  baton::BatchSampler sampler({data.size(), kBatchSize, true, false, kSeed, 0, 1});
  model.ptr()->train();
  auto start = Clock::now();
  at::Tensor loss_sum = at::zeros({}, at::kDouble);
  double last = 0;
  for (std::int64_t b = 0; b < kBatches; ++b) {
    std::int64_t epoch = b / sampler.batches_per_epoch(), in_epoch = b % sampler.batches_per_epoch();
    baton::Batch batch = baton::gather_batch(data, sampler.batch_indices(epoch, in_epoch));
    optimizer->zero_grad();
    at::Tensor loss = at::cross_entropy_loss(model.forward(batch.inputs), batch.targets);
    loss.backward();
    optimizer->step();
    loss_sum.add_(loss.detach());
    if ((b + 1) % 50 == 0) {  // the trainer logs the mean loss every log_interval (50) batches
      last = loss_sum.item<double>() / 50;
      loss_sum.zero_();
    }
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (last != last) std::printf("loss is NaN\n");
  return seconds;
}

double trainer_run(const baton::TensorDataset& data, const std::vector<baton::LoadedPlugin>& plugins) {
  baton::TrainerOptions options;
  options.max_duration = baton::Time(kBatches, baton::TimeUnit::batch);
  options.eval_interval = baton::Time(0, baton::TimeUnit::batch);
  options.save_interval = baton::Time(0, baton::TimeUnit::batch);
  options.batch_size = kBatchSize;
  options.seed = kSeed;
  options.quiet = true;
  options.progress = false;
  auto model = fresh_model();
  auto optimizer = fresh_optimizer(model);
  baton::Trainer trainer(model, optimizer, data, baton::TensorDataset{}, options);
  for (const auto& p : plugins) trainer.add_plugin(p.id, p.plugin);
  auto start = Clock::now();
  trainer.fit();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main() {
  baton::TensorDataset data = baton::make_synthetic_dataset(4096, 9);
  baton::LoaderOptions loader_options;
  loader_options.allow_insecure = true;  // the benchmark's own build folder
  baton::PluginLoader loader(loader_options);
  std::string path = std::string(BATON_BENCH_PLUGIN_DIR) + "/bench_noop.so";
  std::vector<baton::LoadedPlugin> plugins;
  for (int i = 0; i < 8; ++i) {
    plugins.push_back(loader.load(path, baton::PluginConfig()));
    plugins.back().id = "noop" + std::to_string(i);
  }
  std::printf("engine overhead: %lld batches of %lld (mlp 784-512-256-10), 8 no-op plugins matching all events, "
              "%d threads, best of %d\n",
              static_cast<long long>(kBatches), static_cast<long long>(kBatchSize), at::get_num_threads(), kRepeats);
  hand_loop(data);  // warm-up: allocator, thread pool, caches
  double best_hand = 1e30, best_trainer = 1e30;
  for (int r = 0; r < kRepeats; ++r) {
    double h = hand_loop(data);
    double t = trainer_run(data, plugins);
    best_hand = std::min(best_hand, h);
    best_trainer = std::min(best_trainer, t);
    std::printf("  repeat %d: hand loop %.3f s, trainer %.3f s\n", r + 1, h, t);
  }
  std::printf("hand loop %.3f s (%.2f ms/batch), trainer %.3f s (%.2f ms/batch)\n", best_hand,
              1e3 * best_hand / kBatches, best_trainer, 1e3 * best_trainer / kBatches);
  std::printf("RESULT engine_overhead=%.4f\n", best_trainer / best_hand);
  return 0;
}
