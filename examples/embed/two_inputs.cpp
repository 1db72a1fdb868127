// A model whose forward takes two tensors, trained by baton's trainer with the EMA plugin: the batch is named fields
// (x, t and the targets), and the model says which field feeds which argument, in one line.
//
// The task: regress y = sin(3x) * t from x in [-1, 1] and t in [0, 1], a surface neither input gives alone.
// Exits with status 1 if the EMA weights' root mean squared error on held-out points is above 0.08, so the test
// suite can run it; built with the project, and out of tree against an installed baton (docs/embedding.md).
#include <cstdio>
#include <memory>
#include <string>

#include <ATen/Context.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/sin.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include "baton/plugin_loader.h"
#include "baton/trainer.h"

#ifndef BATON_PLUGIN_DIR
#define BATON_PLUGIN_DIR ""  // set by the CMake project to find_package(baton)'s baton_PLUGIN_DIR
#endif

// A module of your own with a forward of two tensors.
struct SurfaceImpl : torch::nn::Module {
  SurfaceImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(2, 64), torch::nn::Tanh(),
                                                         torch::nn::Linear(64, 64), torch::nn::Tanh(),
                                                         torch::nn::Linear(64, 1)))) {}
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t) { return net->forward(at::cat({x, t}, 1)); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Surface);

// Data of your own, as named fields: x [N, 1], t [N, 1] and the targets [N, 1].
baton::TensorDataset surface(std::int64_t n, const std::string& name) {
  baton::TensorDataset data;
  data.name = name;
  const at::Tensor x = at::rand({n, 1}).mul(2).sub(1);
  const at::Tensor t = at::rand({n, 1});
  data.fields.set("x", x);
  data.fields.set("t", t);
  data.targets = at::sin(x.mul(3)).mul(t);
  return data;
}

int main(int argc, char** argv) {
  at::manual_seed(0);
  Surface net;
  // The batch's fields x and t feed the forward's two arguments.
  baton::Model model(net, [net](const baton::Batch& batch) mutable { return net->forward(batch["x"], batch["t"]); });
  auto optimizer = std::make_shared<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(3e-3));

  baton::TrainerOptions options;
  options.max_duration = baton::Time::parse("30ep");
  options.eval_interval = baton::Time::parse("10ep");
  options.save_interval = baton::Time::parse("0ep");
  options.batch_size = 64;
  options.quiet = true;
  if (argc > 1) options.run_dir = argv[1];

  baton::Trainer trainer(model, optimizer, surface(2000, "surface/train"), surface(500, "surface/eval"), options);
  baton::LoaderOptions loader_options;
  loader_options.search_paths = {BATON_PLUGIN_DIR};
  baton::PluginLoader loader(loader_options);
  baton::LoadedPlugin ema = loader.load(loader.resolve("ema"), baton::PluginConfig::from_toml(
                                                                   "half_life = \"200ba\"\nema_start = \"10ep\"\neval = \"both\"", "ema"));
  std::printf("loaded %s %s from %s\n", ema.info.name.c_str(), ema.info.version.c_str(), ema.info.path.c_str());
  trainer.add_plugin(ema.id, ema.plugin);
  const baton::FitResult result = trainer.fit();

  const auto& last = result.evals.back().metrics;
  std::printf("final eval rmse %.4f (EMA weights), %.4f (raw weights)\n", last.at("eval/rmse"),
              last.at("eval_raw/rmse"));
  return last.at("eval/rmse") <= 0.08 ? 0 : 1;
}
