#pragma once
// The reader's own types and functions that the documentation's C++ examples assume (a network of theirs, an image
// folder dataset, a callback, a logger destination), declared just far enough for those examples to compile
// (tests/docs_cpp.py). Nothing here runs.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "baton/dataset.h"
#include "baton/logger_destination.h"
#include "baton/plugin.h"

// find_package(baton) gives it (docs/logging.md); here any folder does.
#ifndef BATON_PLUGIN_DIR
#define BATON_PLUGIN_DIR "plugins"
#endif

// A network of the reader's: one input or two, an auxiliary term, and sampling (docs/embedding.md, diffusion.md).
struct MyNetImpl : torch::nn::Module {
  explicit MyNetImpl(std::int64_t inputs = 2, std::int64_t width = 64)
      : layer(register_module("layer", torch::nn::Linear(inputs, width))) {}
  at::Tensor forward(const at::Tensor& x) { return layer->forward(x); }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t) { return layer->forward(x) + t; }
  at::Tensor penalty() { return layer->weight.pow(2).sum(); }
  at::Tensor sample(std::int64_t n) { return at::zeros({n, 2}); }
  at::Tensor sample(const at::Tensor& noise) { return noise; }
  torch::nn::Linear layer;
};
TORCH_MODULE(MyNet);

// A ResNet of the reader's, registered as a model component (docs/plugins.md).
struct MyResNetImpl : torch::nn::Module {
  MyResNetImpl(std::int64_t depth, std::vector<std::int64_t> input_shape, std::int64_t classes)
      : depth(depth), input_shape(std::move(input_shape)), classes(classes) {}
  at::Tensor forward(const at::Tensor& x) { return x; }
  std::int64_t depth;
  std::vector<std::int64_t> input_shape;
  std::int64_t classes;
};
TORCH_MODULE(MyResNet);

// An image folder dataset of the reader's (docs/plugins.md).
class MyImages final : public baton::Dataset {
 public:
  MyImages(std::string folder, std::string split) : folder_(std::move(folder)), split_(std::move(split)) {}
  std::int64_t size() const override { return 0; }
  baton::Batch get(const at::Tensor&) const override { return {}; }
  baton::DataSpec spec() const override { return {}; }

 private:
  std::string folder_, split_;
};

// A callback and a logger destination of the reader's (docs/embedding.md, logging.md).
struct PrintAccuracy final : baton::Callback {};
struct MyDestination final : baton::LoggerDestination {
  void open(const baton::LoggerContext&) override {}
  void log_metrics(const baton::Timestamp&, const std::vector<std::pair<std::string, double>>&) override {}
};

// The reader's own loop's pieces (docs/ema.md).
inline void evaluate(const std::shared_ptr<torch::nn::Module>&) {}
inline at::Tensor loss_of(const std::shared_ptr<torch::nn::Module>&, const baton::Batch& batch) {
  return batch.inputs().sum();
}
