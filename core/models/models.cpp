#include "baton/models.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include <string>
#include <utility>

#include "baton/error.h"

namespace baton {
namespace {

constexpr std::int64_t kConvHidden = 128;

// Parameter names end up in checkpoints and safetensors exports, so the layout is fixed and readable:
// mlp "layers.<i>.weight"; convnet "features.<i>.weight" (conv, batchnorm) and "classifier.<i>.weight".
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelSpec& spec, const std::vector<std::int64_t>& widths) {
    torch::nn::Sequential layers;
    std::int64_t in = spec.input_channels * spec.input_size * spec.input_size;
    for (auto width : widths) {
      layers->push_back(torch::nn::Linear(in, width));
      layers->push_back(torch::nn::ReLU());
      in = width;
    }
    layers->push_back(torch::nn::Linear(in, spec.num_classes));
    layers_ = register_module("layers", layers);
  }

  at::Tensor forward(const at::Tensor& x) { return layers_->forward(x.flatten(1)); }

 private:
  torch::nn::Sequential layers_;
};
TORCH_MODULE(Mlp);

class ConvNetImpl : public torch::nn::Module {
 public:
  ConvNetImpl(const ModelSpec& spec, const std::vector<std::int64_t>& widths) {
    torch::nn::Sequential features;
    std::int64_t channels = spec.input_channels;
    std::int64_t size = spec.input_size;
    for (auto width : widths) {
      // No conv bias: the BatchNorm right after it has its own shift.
      features->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, width, 3).padding(1).bias(false)));
      features->push_back(torch::nn::BatchNorm2d(width));
      features->push_back(torch::nn::ReLU());
      features->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
      channels = width;
      size /= 2;
    }
    torch::nn::Sequential classifier;
    classifier->push_back(torch::nn::Linear(channels * size * size, kConvHidden));
    classifier->push_back(torch::nn::ReLU());
    classifier->push_back(torch::nn::Linear(kConvHidden, spec.num_classes));
    features_ = register_module("features", features);
    classifier_ = register_module("classifier", classifier);
  }

  at::Tensor forward(const at::Tensor& x) { return classifier_->forward(features_->forward(x).flatten(1)); }

 private:
  torch::nn::Sequential features_;
  torch::nn::Sequential classifier_;
};
TORCH_MODULE(ConvNet);

[[noreturn]] void bad_spec(const ModelSpec& spec, const std::string& problem) {
  throw Error("model '" + spec.name + "': " + problem);
}

void check_spec(const ModelSpec& spec, const std::vector<std::int64_t>& widths) {
  if (spec.input_channels < 1) bad_spec(spec, "input_channels must be positive");
  if (spec.input_size < 1) bad_spec(spec, "input_size must be positive");
  if (spec.num_classes < 1) bad_spec(spec, "num_classes must be positive");
  for (auto width : widths)
    if (width < 1) bad_spec(spec, "every width must be positive, got " + std::to_string(width));
}

// Each convnet stage halves the image; it must not vanish before the classifier.
void check_convnet_depth(const ModelSpec& spec, const std::vector<std::int64_t>& widths) {
  std::int64_t size = spec.input_size;
  for (std::size_t i = 0; i < widths.size(); ++i) size /= 2;
  if (size < 1)
    bad_spec(spec, std::to_string(widths.size()) + " pooling stages shrink a " + std::to_string(spec.input_size) +
                       "x" + std::to_string(spec.input_size) + " input to nothing");
}

}  // namespace

torch::nn::AnyModule make_model(const ModelSpec& spec) {
  if (spec.name == "mlp") {
    const auto widths = spec.widths.empty() ? std::vector<std::int64_t>{256, 128} : spec.widths;
    check_spec(spec, widths);
    return torch::nn::AnyModule(Mlp(spec, widths));
  }
  if (spec.name == "convnet") {
    const auto widths = spec.widths.empty() ? std::vector<std::int64_t>{32, 64} : spec.widths;
    check_spec(spec, widths);
    check_convnet_depth(spec, widths);
    return torch::nn::AnyModule(ConvNet(spec, widths));
  }
  throw Error("unknown model '" + spec.name + "' (known models: mlp, convnet)");
}

}  // namespace baton
