#include "fd_metric.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "baton/models.h"
#include "baton/safetensors.h"
#include "diffusion_math.h"

namespace baton_diffusion {

namespace {

// The classifier cut after its hidden ReLU: features, flatten, Linear, ReLU (the convnet of baton/models.h).
class FeatureNet {
 public:
  FeatureNet(std::shared_ptr<torch::nn::Module> module) : module_(std::move(module)) {
    const auto children = module_->named_children();
    features_ = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(children["features"]);
    auto classifier = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(children["classifier"]);
    if (!features_ || !classifier) throw baton::Error("fd: the classifier is not baton's convnet");
    hidden_ = (*classifier)[0]->as<torch::nn::LinearImpl>();
    module_->eval();
  }
  std::int64_t width() const { return hidden_->options.out_features(); }
  at::Tensor operator()(const at::Tensor& images) {
    if (images.device() != device_) {
      module_->to(images.device());
      device_ = images.device();
    }
    return at::relu(hidden_->forward(features_->forward(images).flatten(1)));
  }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<torch::nn::SequentialImpl> features_;
  torch::nn::LinearImpl* hidden_ = nullptr;
  at::Device device_ = at::kCPU;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Builds the convnet the config describes and loads every parameter and buffer from the safetensors file by name.
std::shared_ptr<torch::nn::Module> load_classifier(const baton::PluginConfig& config,
                                                   const std::vector<std::int64_t>& input_shape) {
  const std::string weights = config.get_text("classifier");
  const std::string config_path = config.get_text("classifier_config");
  if (!std::ifstream(config_path))
    config.fail("classifier_config", "cannot read '" + config_path + "' (the config the classifier was trained with)");
  const baton::PluginConfig trained = baton::PluginConfig::from_toml(read_text(config_path), "classifier", config_path);
  const baton::PluginConfig model = trained.get<baton::PluginConfig>("model");
  const std::string name = model.get_or("name", "convnet");
  if (name != "convnet")
    config.fail("classifier_config", "'" + config_path + "' trains model '" + name +
                                         "'; fd takes the penultimate activations of a convnet");
  if (!std::ifstream(weights))
    config.fail("classifier", "no file '" + weights + "': train the classifier first (build/bin/baton train " +
                                  config_path + " writes runs/<name>/model.safetensors)");
  const baton::SafetensorsContents file = baton::read_safetensors(weights);
  std::int64_t classes = 0;
  for (const auto& [key, tensor] : file.tensors)
    if (key == "classifier.2.weight") classes = tensor.size(0);
  if (classes == 0)
    config.fail("classifier", "'" + weights + "' holds no convnet (no tensor classifier.2.weight)");
  baton::ModelSpec spec;
  spec.name = "convnet";
  spec.widths = model.get_or<std::vector<std::int64_t>>("widths", {32, 64});
  spec.input_shape = input_shape;
  spec.outputs = classes;
  std::shared_ptr<torch::nn::Module> module = baton::make_model(spec).ptr();
  c10::NoGradGuard no_grad;
  const auto load = [&](const std::string& key, at::Tensor& target) {
    for (const auto& [stored, tensor] : file.tensors)
      if (stored == key) {
        if (tensor.sizes() != target.sizes())
          config.fail("classifier", "'" + weights + "': tensor " + key + " has another shape than the convnet of '" +
                                        config_path + "' (was it trained with that config?)");
        target.copy_(tensor);
        return;
      }
    config.fail("classifier", "'" + weights + "' lacks tensor " + key + " of the convnet of '" + config_path +
                                  "' (was it trained with that config?)");
  };
  for (auto& item : module->named_parameters()) load(item.key(), item.value());
  for (auto& item : module->named_buffers()) load(item.key(), item.value());
  return module;
}

class FrechetDistance final : public baton::Metric {
 public:
  FrechetDistance(std::shared_ptr<torch::nn::Module> classifier, std::string samples, std::string real)
      : net_(std::move(classifier)), samples_(std::move(samples)), real_(std::move(real)) {
    reset();
  }

  void update(const baton::Outputs& outputs, const baton::Batch& batch) override {
    c10::NoGradGuard no_grad;
    add(real_sums_, net_(batch[real_].to(at::kFloat)));
    add(generated_sums_, net_(outputs[samples_].to(at::kFloat)));
  }

  // [n_r, sum_r (d), outer_r (d*d), n_g, sum_g, outer_g]
  std::vector<double> sums() const override {
    std::vector<double> out;
    for (const FeatureSums* s : {&real_sums_, &generated_sums_}) {
      out.push_back(s->count);
      const at::Tensor flat = at::cat({s->sum, s->outer.flatten()}).contiguous();
      out.insert(out.end(), flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
    }
    return out;
  }

  double compute(const std::vector<double>& sums) const override {
    const std::int64_t d = net_width();
    const std::size_t side = static_cast<std::size_t>(1 + d + d * d);
    const auto unpack = [&](std::size_t at) {
      FeatureSums s;
      s.count = sums[at];
      std::vector<double> sum(sums.begin() + at + 1, sums.begin() + at + 1 + d);
      std::vector<double> outer(sums.begin() + at + 1 + d, sums.begin() + at + side);
      s.sum = at::tensor(sum, at::kDouble);
      s.outer = at::tensor(outer, at::kDouble).view({d, d});
      return s;
    };
    return frechet_distance(unpack(0), unpack(side));
  }

  void reset() override {
    const std::int64_t d = net_width();
    for (FeatureSums* s : {&real_sums_, &generated_sums_}) {
      s->count = 0;
      s->sum = at::zeros({d}, at::kDouble);
      s->outer = at::zeros({d, d}, at::kDouble);
    }
  }

  bool higher_is_better() const override { return false; }

 private:
  std::int64_t net_width() const { return net_.width(); }
  static void add(FeatureSums& s, const at::Tensor& features) {
    const at::Tensor f = features.to(at::kDouble).cpu();
    s.count += static_cast<double>(f.size(0));
    s.sum.add_(f.sum(0));
    s.outer.add_(f.t().matmul(f));
  }

  mutable FeatureNet net_;
  std::string samples_, real_;
  FeatureSums real_sums_, generated_sums_;
};

}  // namespace

std::unique_ptr<baton::Metric> make_fd_metric(const baton::PluginConfig& config, const baton::DataSpec& data) {
  const std::string real = config.get_or("real", "inputs");
  const std::string samples = config.get_or("samples", "samples");
  const baton::FieldSpec* field = data.field(real);
  if (!data.fields.empty() && field == nullptr)
    config.fail("real", "the data has no field '" + real + "' (its fields: " + data.field_names() + ")");
  const std::vector<std::int64_t> shape = field ? field->shape : data.input_shape;
  return std::make_unique<FrechetDistance>(load_classifier(config, shape), samples, real);
}

}  // namespace baton_diffusion
