#include "baton_test.h"

#include <cmath>
#include <string>
#include <vector>

#include <ATen/ops/tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "algorithm_test_support.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace gradient_clipping_test {

using namespace algorithm_test;

namespace {

// A linear layer (2-d weight, bias) and a 1x1 convolution (4-d weight) with weights and gradients set by hand.
struct TwoLayersImpl : torch::nn::Module {
  TwoLayersImpl()
      : fc(register_module("fc", torch::nn::Linear(3, 2))),
        conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 2, 1).bias(false)))) {}
  torch::nn::Linear fc;
  torch::nn::Conv2d conv;
};
TORCH_MODULE(TwoLayers);

at::Tensor values(std::vector<double> v, std::vector<std::int64_t> shape) {
  return at::tensor(v, at::kFloat).reshape(shape);
}

struct Gradients {
  std::vector<double> fc_weight, fc_bias, conv_weight;
};

// fc.weight = [[1, 0, 0], [0, 2, 0]], fc.bias = [0, 0], conv.weight = [[3, 4], [0, 1e-4]] (as [2, 2, 1, 1]), with
// the given gradients; runs the plugin at after_train_batch and returns the gradients it left.
Gradients clip(const std::string& toml, const Gradients& g, RecordingLogger& logger) {
  TwoLayers model;
  {
    c10::NoGradGuard no_grad;
    model->fc->weight.copy_(values({1, 0, 0, 0, 2, 0}, {2, 3}));
    model->fc->bias.copy_(values({0, 0}, {2}));
    model->conv->weight.copy_(values({3, 4, 0, 1e-4}, {2, 2, 1, 1}));
  }
  model->fc->weight.mutable_grad() = values(g.fc_weight, {2, 3});
  model->fc->bias.mutable_grad() = values(g.fc_bias, {2});
  model->conv->weight.mutable_grad() = values(g.conv_weight, {2, 2, 1, 1});
  auto plugin = load(toml, "gradient_clipping");
  baton::State state;
  state.facts.set_model(model.ptr().get());
  baton::run_subscribed(*plugin.plugin, Event::after_train_batch, state, logger);
  return {values_of(model->fc->weight.grad()), values_of(model->fc->bias.grad()), values_of(model->conv->weight.grad())};
}

// Every gradient: ||g|| = sqrt(3^2 + 4^2 + 12^2 + 0 + 0 + 0) = 13.
const Gradients kGradients = {{3, 4, 0, 0, 0, 0}, {0, 12}, {0, 0, 0, 0}};

}  // namespace

TEST_SUITE("gradient_clipping_plugin") {
  TEST_CASE("norm: every gradient scaled by threshold / (total norm + 1e-6) when above the threshold") {
    RecordingLogger logger;
    const Gradients out = clip("clipping_type = \"norm\"\nclipping_threshold = 6.5", kGradients, logger);
    const double c = 6.5 / (13 + 1e-6);  // ~ 1/2
    CHECK(max_abs_difference(out.fc_weight, {3 * c, 4 * c, 0, 0, 0, 0}) < 1e-6);
    CHECK(max_abs_difference(out.fc_bias, {0, 12 * c}) < 1e-6);
    CHECK(max_abs_difference(out.conv_weight, {0, 0, 0, 0}) == 0);
    CHECK(logger.last("gradient_clipping/grad_norm") == doctest::Approx(13).epsilon(1e-6));

    // Below the threshold nothing changes, bit for bit.
    const Gradients same = clip("clipping_type = \"norm\"\nclipping_threshold = 13.5", kGradients, logger);
    CHECK(same.fc_weight == kGradients.fc_weight);
    CHECK(same.fc_bias == kGradients.fc_bias);
  }

  TEST_CASE("value: every element clamped to [-threshold, threshold]") {
    RecordingLogger logger;
    const Gradients in = {{3, -4, 0.5, -0.25, 0, 7}, {0, -12}, {1, -1, 3.5, -3.6}};
    const Gradients out = clip("clipping_type = \"value\"\nclipping_threshold = 3.5", in, logger);
    CHECK(out.fc_weight == std::vector<double>{3, -3.5, 0.5, -0.25, 0, 3.5});
    CHECK(out.fc_bias == std::vector<double>{0, -3.5});
    CHECK(out.conv_weight == std::vector<double>{1, -1, 3.5, -3.5});
  }

  TEST_CASE("adaptive: each unit scaled to threshold * max(||W_unit||, 1e-3) / ||G_unit|| when above it") {
    RecordingLogger logger;
    const Gradients in = {{3, 4, 0, 0, 0, 0.1}, {0, 12}, {6, 8, 1, 0}};
    const Gradients out = clip("clipping_type = \"adaptive\"\nclipping_threshold = 0.1", in, logger);
    // fc rows: ||W|| = 1, ||G|| = 5: allowed 0.1, scaled by 0.02. ||W|| = 2, ||G|| = 0.1 <= 0.2: unchanged.
    CHECK(max_abs_difference(out.fc_weight, {0.06, 0.08, 0, 0, 0, 0.1}) < 1e-7);
    // fc bias (one unit): ||W|| = 0 -> eps 1e-3: allowed 1e-4, ||G|| = 12: scaled by 1e-4 / 12.
    CHECK(max_abs_difference(out.fc_bias, {0, 1e-4}) < 1e-9);
    // conv filters (over in-channels and kernel): ||W|| = 5, ||G|| = 10: allowed 0.5, scaled by 0.05.
    // ||W|| = 1e-4 -> eps 1e-3: allowed 1e-4, ||G|| = 1: scaled by 1e-4.
    CHECK(max_abs_difference(out.conv_weight, {0.3, 0.4, 1e-4, 0}) < 1e-7);  // float32 rounding of 0.3, 0.4
  }

  TEST_CASE("in a run it acts at after_train_batch and the optimizer steps with the clipped gradients") {
    struct Probe : baton::Callback {
      double grad_norm = NAN;
      at::Tensor weight_before, grad, weight_after;
      void after_train_batch(baton::State& s, baton::Logger&) override {
        if (s.timestamp().batch != 0) return;
        double sum = 0;
        for (const auto& p : s.facts.model()->parameters()) sum += p.grad().to(at::kDouble).pow(2).sum().item<double>();
        grad_norm = std::sqrt(sum);
        const at::Tensor first = s.facts.model()->parameters().front();  // parameters() returns a fresh vector
        weight_before = first.detach().clone();
        grad = first.grad().detach().clone();
      }
      void batch_end(baton::State& s, baton::Logger&) override {
        if (s.timestamp().batch == 1) weight_after = s.facts.model()->parameters().front().detach().clone();
      }
    };
    auto options = quiet_options();
    options.max_duration = Time(2, TimeUnit::batch);
    options.eval_interval = Time(0, TimeUnit::epoch);
    options.save_interval = Time(0, TimeUnit::epoch);
    auto trainer = make_trainer(options);
    auto probe = std::make_shared<Probe>();
    trainer->add_plugin("gradient_clipping", load("clipping_type = \"norm\"\nclipping_threshold = 0.001",
                                                  "gradient_clipping").plugin);
    trainer->add_plugin("probe", probe);
    trainer->fit();
    CHECK(probe->grad_norm == doctest::Approx(0.001).epsilon(1e-4));
    // The norm before clipping (logged by the plugin) is far above the threshold: clipping changed the step.
    CHECK(trainer->state().metrics.at("gradient_clipping/grad_norm") > 0.1);
    // SGD's first step with momentum: w <- w - lr * g (the buffer starts as g), lr = 0.05. Per element, up to the
    // float rounding of w - lr g (half an ulp of w, plus that of the product).
    const std::vector<double> before = values_of(probe->weight_before), after = values_of(probe->weight_after),
                              grad = values_of(probe->grad);
    int off = 0;
    for (std::size_t i = 0; i < before.size(); ++i) {
      const double step = after[i] - before[i], want = -0.05 * grad[i];
      off += std::abs(step - want) > 1.2e-7 * (std::abs(before[i]) + std::abs(want)) + 1e-15;
    }
    CHECK(off == 0);
  }

  TEST_CASE("bad keys are configuration errors at their line") {
    const std::string type = config_error("clipping_threshold = 1.0\nclipping_type = \"l2\"", "gradient_clipping");
    CHECK(contains(type, "run.toml:2"));
    CHECK(contains(type, "plugins.gradient_clipping.clipping_type: must be \"norm\", \"value\" or \"adaptive\", got \"l2\""));
    CHECK(contains(config_error("clipping_type = \"norm\"\nclipping_threshold = 0", "gradient_clipping"),
                   "plugins.gradient_clipping.clipping_threshold: must be a finite number > 0, got 0"));
    CHECK(contains(config_error("clipping_type = \"norm\"", "gradient_clipping"), "clipping_threshold"));
    CHECK(contains(config_error("clipping_threshold = 1.0", "gradient_clipping"), "clipping_type"));
    CHECK(contains(config_error("clipping_type = \"norm\"\nclipping_threshold = 1.0\nmax_norm = 1.0", "gradient_clipping"),
                   "unknown key 'max_norm'"));
  }
}

}  // namespace gradient_clipping_test
