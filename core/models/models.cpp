#include "baton/models.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <ATen/ops/dropout.h>

#include <string>
#include <utility>

#include "baton/text.h"
#include "baton/components.h"
#include "baton/unit.h"
#include "baton/error.h"
#include "components/builtins.h"

namespace baton {
namespace {

constexpr std::int64_t kConvHidden = 128;

// Parameter names end up in checkpoints and safetensors exports, so the layout is fixed and readable:
// mlp "layers.<i>.weight"; convnet "features.<i>.weight" (conv, batchnorm) and "classifier.<i>.weight".
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelSpec& spec, const std::vector<std::int64_t>& widths) : dropout_(spec.dropout) {
    torch::nn::Sequential layers;
    std::int64_t in = 1;
    for (auto d : spec.input_shape) in *= d;
    for (auto width : widths) {
      layers->push_back(torch::nn::Linear(in, width));
      layers->push_back(torch::nn::ReLU());
      in = width;
    }
    layers->push_back(torch::nn::Linear(in, spec.outputs));
    layers_ = register_module("layers", layers);
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = x.flatten(1);
    // Linear, ReLU, Linear, ReLU, ..., Linear: dropout after each ReLU (functional, so that the parameter names
    // are those of the model without it).
    std::size_t i = 0;
    for (auto& layer : *layers_) {
      h = run_unit(layer, h);
      if (i++ % 2 == 1 && dropout_ > 0) h = at::dropout(h, dropout_, is_training());
    }
    return h;
  }

 private:
  torch::nn::Sequential layers_;
  double dropout_;
};
TORCH_MODULE(Mlp);

class ConvNetImpl : public torch::nn::Module {
 public:
  ConvNetImpl(const ModelSpec& spec, const std::vector<std::int64_t>& widths)
      : dropout_(spec.dropout), global_pool_(spec.global_pool) {
    torch::nn::Sequential features;
    std::int64_t channels = spec.input_shape[0];
    std::int64_t height = spec.input_shape[1], width_px = spec.input_shape[2];
    for (auto width : widths) {
      // No conv bias: the BatchNorm right after it has its own shift.
      features->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, width, 3).padding(1).bias(false)));
      features->push_back(torch::nn::BatchNorm2d(width));
      features->push_back(torch::nn::ReLU());
      features->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
      channels = width;
      height /= 2;
      width_px /= 2;
    }
    torch::nn::Sequential classifier;
    classifier->push_back(torch::nn::Linear(global_pool_ ? channels : channels * height * width_px, kConvHidden));
    classifier->push_back(torch::nn::ReLU());
    classifier->push_back(torch::nn::Linear(kConvHidden, spec.outputs));
    features_ = register_module("features", features);
    classifier_ = register_module("classifier", classifier);
  }

  at::Tensor forward(const at::Tensor& x) {
    // classifier: Linear, ReLU, (dropout, functional: the names stay those of the model without it), Linear.
    // Each part through run_unit (baton/unit.h): the parts holding parameters are zero3's default units.
    at::Tensor h = x;
    for (auto& part : *features_) h = run_unit(part, h);
    h = global_pool_ ? h.mean({2, 3}) : h.flatten(1);
    auto part = classifier_->begin();
    h = run_unit(*part++, h);
    h = run_unit(*part++, h);
    if (dropout_ > 0) h = at::dropout(h, dropout_, is_training());
    return run_unit(*part, h);
  }

 private:
  torch::nn::Sequential features_;
  torch::nn::Sequential classifier_;
  double dropout_;
  bool global_pool_;
};
TORCH_MODULE(ConvNet);

[[noreturn]] void bad_spec(const ModelSpec& spec, const std::string& problem) {
  throw Error("model '" + spec.name + "': " + problem);
}

void check_spec(const ModelSpec& spec, const std::vector<std::int64_t>& widths) {
  for (auto d : spec.input_shape)
    if (d < 1) bad_spec(spec, "every input dimension must be positive, got " + format_shape(spec.input_shape));
  if (spec.outputs < 1) bad_spec(spec, "outputs must be positive, got " + std::to_string(spec.outputs));
  if (!(spec.dropout >= 0 && spec.dropout < 1)) bad_spec(spec, "dropout must be in [0, 1)");
  for (auto width : widths)
    if (width < 1) bad_spec(spec, "every width must be positive, got " + std::to_string(width));
}

// A convnet takes images [C, H, W], and each stage halves them: they must not vanish before the classifier.
void check_convnet_shape(const ModelSpec& spec, const std::vector<std::int64_t>& widths) {
  if (spec.input_shape.size() != 3)
    bad_spec(spec, "needs image inputs (channels x height x width), but the data's samples are " +
                       format_shape(spec.input_shape) + " (the mlp takes any shape)");
  std::int64_t height = spec.input_shape[1], width = spec.input_shape[2];
  for (std::size_t i = 0; i < widths.size(); ++i) height /= 2, width /= 2;
  if (height < 1 || width < 1)
    bad_spec(spec, std::to_string(widths.size()) + " pooling stages shrink a " +
                       std::to_string(spec.input_shape[1]) + "x" + std::to_string(spec.input_shape[2]) +
                       " input to nothing");
}

}  // namespace

torch::nn::AnyModule make_model(const ModelSpec& spec) {
  if (spec.name == "mlp") {
    const auto& widths = spec.widths;  // empty: no hidden layer, a linear model
    check_spec(spec, widths);
    return torch::nn::AnyModule(Mlp(spec, widths));
  }
  if (spec.name == "convnet") {
    const auto widths = spec.widths.empty() ? std::vector<std::int64_t>{32, 64} : spec.widths;
    check_spec(spec, widths);
    check_convnet_shape(spec, widths);
    return torch::nn::AnyModule(ConvNet(spec, widths));
  }
  throw Error("unknown model '" + spec.name + "' (known models: mlp, convnet)");
}

namespace {

// [model] widths = [...]: each >= 1; the convnet needs one at least, an mlp without any is a linear model.
std::vector<std::int64_t> read_widths(const PluginConfig& config, bool need_one, std::vector<std::int64_t> fallback) {
  if (!config.has("widths")) return fallback;
  auto widths = config.get<std::vector<std::int64_t>>("widths");
  for (std::size_t i = 0; i < widths.size(); ++i)
    if (widths[i] < 1)
      config.fail("widths", "expected every width >= 1, got " + std::to_string(widths[i]) + " at index " +
                                std::to_string(i));
  if (need_one && widths.empty()) config.fail("widths", "expected at least one width for convnet, got []");
  return widths;
}

ModelFactory builtin_factory(const std::string& name, bool need_one, std::vector<std::int64_t> fallback) {
  return [name, need_one, fallback](const PluginConfig& config, const DataSpec& data) {
    ModelSpec spec;
    spec.name = name;
    spec.widths = read_widths(config, need_one, fallback);
    spec.dropout = config.get_number_or("dropout", 0.0, Range::half_open(0, 1));
    if (name == "convnet") spec.global_pool = config.get_or<bool>("global_pool", false);
    spec.input_shape = data.input_shape;
    spec.outputs = data.output_size();
    try {
      return make_model(spec);
    } catch (const Error& e) {
      // The shapes come from the dataset: say so where the model is named.
      config.fail("name", std::string(e.what()) + " (data: " + data.describe() + ")");
    }
  };
}

}  // namespace

void register_builtin_models(Components& components) {
  components.models.add("mlp", "flatten, Linear+ReLU per width (default [256, 128]), Linear",
                        builtin_factory("mlp", false, {256, 128}));
  components.models.add("convnet",
                        "per width (default [32, 64]) Conv3x3+BatchNorm+ReLU+MaxPool2, then Linear(128)+ReLU, Linear; "
                        "global_pool = true averages each channel first, so any image size fits",
                        builtin_factory("convnet", true, {32, 64}));
}

}  // namespace baton
