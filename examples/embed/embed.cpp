// Embedding baton in your own program: your own module (a torch::nn::Sequential), optimizer and data, baton's
// trainer (events, plugins, evaluation, checkpoints), an in-process callback, and the EMA plugin loaded from its
// file with the same loader and checks as `baton train`. No TOML file.
//
// The task: classify points of two interleaved spirals, a problem a linear model cannot solve.
// Exits with status 1 if the model evaluated with its EMA weights does not reach 90 % accuracy, so the test suite
// can run it; built with the project, and out of tree against an installed baton (docs/embedding.md).
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include <ATen/Context.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/stack.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include "baton/plugin_loader.h"
#include "baton/trainer.h"

#ifndef BATON_PLUGIN_DIR
#define BATON_PLUGIN_DIR ""  // set by the CMake project to find_package(baton)'s baton_PLUGIN_DIR
#endif

// Data of your own: inputs [N, ...] and int64 class targets [N].
baton::TensorDataset spirals(std::int64_t per_class, const std::string& name) {
  at::Tensor t = at::linspace(0.25, 3.0 * M_PI, per_class);
  auto arm = [&](double phase) {
    at::Tensor r = t / (3.0 * M_PI);
    return at::stack({r * at::cos(t + phase), r * at::sin(t + phase)}, 1) + 0.02 * at::randn({per_class, 2});
  };
  baton::TensorDataset data;
  data.name = name;
  data.inputs = at::cat({arm(0), arm(M_PI)});
  data.targets = at::cat({at::full({per_class}, 0, at::kLong), at::full({per_class}, 1, at::kLong)});
  data.num_classes = 2;
  return data;
}

// A callback of your own, in-process: prints each evaluation.
struct PrintAccuracy : baton::Callback {
  void eval_end(baton::State& state, baton::Logger&) override {
    std::printf("epoch %lld: eval accuracy %.3f\n", static_cast<long long>(state.timestamp().epoch),
                state.metrics.at("eval/accuracy"));
  }
};

int main(int argc, char** argv) {
  at::manual_seed(0);
  // A model of your own: any module whose forward takes and returns one tensor (baton/model.h).
  torch::nn::Sequential net(torch::nn::Linear(2, 64), torch::nn::ReLU(), torch::nn::Linear(64, 64),
                            torch::nn::ReLU(), torch::nn::Linear(64, 2));
  auto optimizer = std::make_shared<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(1e-2));

  baton::TrainerOptions options;
  options.max_duration = baton::Time::parse("40ep");
  options.eval_interval = baton::Time::parse("10ep");
  options.save_interval = baton::Time::parse("0ep");  // this example keeps nothing on disk
  options.batch_size = 50;
  options.quiet = true;
  if (argc > 1) options.run_dir = argv[1];  // pass a folder to get metrics.jsonl, checkpoints, model.safetensors

  baton::Trainer trainer(net, optimizer, spirals(500, "spirals/train"), spirals(200, "spirals/eval"), options);
  trainer.add_plugin("print_accuracy", std::make_shared<PrintAccuracy>());

  // The EMA plugin from its file, its keys checked as in a config's [[plugins]] table; evaluation then swaps the
  // averaged weights in.
  baton::LoaderOptions loader_options;
  loader_options.search_paths = {BATON_PLUGIN_DIR};
  baton::PluginLoader loader(loader_options);
  baton::LoadedPlugin ema = loader.load(loader.resolve("ema"), baton::PluginConfig::from_toml(
                                                                   "half_life = \"100ba\"\nema_start = \"20ep\"", "ema"));
  std::printf("loaded %s %s from %s\n", ema.info.name.c_str(), ema.info.version.c_str(), ema.info.path.c_str());
  trainer.add_plugin(ema.id, ema.plugin);
  baton::FitResult result = trainer.fit();

  double accuracy = result.evals.back().metrics.at("eval/accuracy");
  std::printf("final eval accuracy %.3f after %lld batches\n", accuracy, static_cast<long long>(result.end.batch));
  return accuracy >= 0.90 ? 0 : 1;
}
