// Engine overhead: the trainer with 8 no-op plugins (loaded from shared libraries, matching every event) against a
// hand-written LibTorch loop doing the same steps on the same model, data and batch order. Both run on one thread
// and are timed several times, interleaved, by the process's CPU time (what the work costs, insensitive to other
// programs sharing the machine) and by wall time; the fastest of each is compared.
// Last line: RESULT engine_overhead=<trainer time / hand loop time>   (target <= 1.02)
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <ctime>
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
#include "baton/builtin_datasets.h"
#include "bench_trainer_options.h"
#include "data/sampler.h"
#include "baton/plugin_loader.h"
#include "baton/models.h"

namespace {

constexpr std::int64_t kBatches = 120;
constexpr std::int64_t kBatchSize = 64;
constexpr std::uint64_t kSeed = 3;
constexpr int kRepeats = 21;

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Timing {
  double wall = 0;
  double cpu = 0;
};

template <class F>
Timing timed(F&& work) {
  auto wall_start = Clock::now();
  double cpu_start = cpu_seconds();
  work();
  return {std::chrono::duration<double>(Clock::now() - wall_start).count(), cpu_seconds() - cpu_start};
}

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

Timing hand_loop(const baton::TensorDataset& data) {
  auto model = fresh_model();
  auto optimizer = fresh_optimizer(model);
  baton::BatchSampler sampler({data.size(), kBatchSize, true, false, kSeed, 0, 1});
  model.ptr()->train();
  at::Tensor loss_sum = at::zeros({}, at::kDouble);
  double last = 0;
  Timing t = timed([&] {
  for (std::int64_t b = 0; b < kBatches; ++b) {
    std::int64_t epoch = b / sampler.batches_per_epoch(), in_epoch = b % sampler.batches_per_epoch();
    baton::Batch batch = data.get(sampler.batch_indices(epoch, in_epoch));
    optimizer->zero_grad();
    at::Tensor loss = at::cross_entropy_loss(model.forward(batch.inputs()), batch.targets());
    loss.backward();
    optimizer->step();
    loss_sum.add_(loss.detach());
    if ((b + 1) % 50 == 0) {  // the trainer logs the mean loss every log_interval (50) batches
      last = loss_sum.item<double>() / 50;
      loss_sum.zero_();
    }
  }
  });
  if (last != last) std::printf("loss is NaN\n");
  return t;
}

Timing trainer_run(const baton::TensorDataset& data, const std::vector<baton::LoadedPlugin>& plugins) {
  baton::TrainerOptions options = bench::steps_only(kBatches, kBatchSize);
  options.seed = kSeed;
  auto model = fresh_model();
  auto optimizer = fresh_optimizer(model);
  baton::Trainer trainer(model, optimizer, data, baton::TensorDataset{}, options);
  for (const auto& p : plugins) trainer.add_plugin(p.id, p.plugin);
  return timed([&] { trainer.fit(); });
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
  at::set_num_threads(1);
  // OpenBLAS keeps its own thread pool, which at::set_num_threads does not reach; its spinning workers would
  // count in the CPU time. One thread for it too, when it is the BLAS in use.
  if (auto* set_blas_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set_blas_threads(1);
  std::printf("engine overhead: %lld batches of %lld (mlp 784-512-256-10), 8 no-op plugins matching all events, "
              "1 thread, best of %d\n",
              static_cast<long long>(kBatches), static_cast<long long>(kBatchSize), kRepeats);
  hand_loop(data);  // warm-up: allocator, caches
  Timing best_hand{1e30, 1e30}, best_trainer{1e30, 1e30};
  for (int r = 0; r < kRepeats; ++r) {
    // Alternate which goes first, so a slow phase of the machine does not always hit the same side.
    Timing h, t;
    if (r % 2 == 0) {
      h = hand_loop(data);
      t = trainer_run(data, plugins);
    } else {
      t = trainer_run(data, plugins);
      h = hand_loop(data);
    }
    best_hand = {std::min(best_hand.wall, h.wall), std::min(best_hand.cpu, h.cpu)};
    best_trainer = {std::min(best_trainer.wall, t.wall), std::min(best_trainer.cpu, t.cpu)};
    std::printf("  repeat %d: hand loop %.3f s (cpu %.3f s), trainer %.3f s (cpu %.3f s)\n", r + 1, h.wall, h.cpu,
                t.wall, t.cpu);
  }
  std::printf("best: hand loop %.3f s wall, %.3f s cpu (%.2f ms/batch); trainer %.3f s wall, %.3f s cpu "
              "(%.2f ms/batch)\n",
              best_hand.wall, best_hand.cpu, 1e3 * best_hand.cpu / kBatches, best_trainer.wall, best_trainer.cpu,
              1e3 * best_trainer.cpu / kBatches);
  std::printf("wall-time ratio %.4f\n", best_trainer.wall / best_hand.wall);
  std::printf("RESULT engine_overhead=%.4f\n", best_trainer.cpu / best_hand.cpu);
  return 0;
}
