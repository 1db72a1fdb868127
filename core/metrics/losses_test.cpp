#include "baton_test.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/tensor.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "baton/components.h"
#include "baton/error.h"
#include "components/builtins.h"
#include "error_text.h"

using namespace baton;

// A namespace of its own: metrics_test.cpp has helpers of the same names (and may share a unity build's file).
namespace losses_test {

Components registered() {
  Components c;
  register_builtin_losses(c);
  register_builtin_metrics(c);
  return c;
}

DataSpec classes(std::int64_t n) { return DataSpec{{4}, {}, n, {}}; }
DataSpec regression() { return DataSpec{{13}, {}, 0, {}}; }

// The loss on an outputs tensor and a targets tensor (a batch of the targets alone).
using TensorLoss = std::function<at::Tensor(const at::Tensor& outputs, const at::Tensor& targets)>;

TensorLoss loss(const std::string& name, const std::string& toml = "", const DataSpec& data = regression()) {
  static const Components c = registered();
  const auto* entry = c.losses.find(name);
  REQUIRE(entry != nullptr);
  const PluginConfig config = PluginConfig::from_toml(toml, name);
  LossFunction f = entry->factory(config, data);
  config.reject_unread();  // every key given was read
  return [f](const at::Tensor& outputs, const at::Tensor& targets) {
    return f(Outputs(outputs), Batch::of(at::Tensor(), targets));
  };
}

double value(const at::Tensor& t) {
  REQUIRE(t.dim() == 0);
  return t.item<double>();
}

at::Tensor floats(const std::vector<float>& v) { return at::tensor(v); }
at::Tensor floats(const std::vector<float>& v, std::int64_t rows) { return at::tensor(v).reshape({rows, -1}); }
at::Tensor longs(const std::vector<std::int64_t>& v) { return at::tensor(v); }

// The fixed tensors the cross-checks share with the Python script below.
const at::Tensor& logits() {  // 8x3
  static const at::Tensor t = floats({2.0, 0.5, -1.0, 0.1, 1.5, 0.3, -0.5, 0.2, 2.2, 1.2, 1.1, 0.0,  //
                                      -0.8, 0.1, 0.5, 3.0, 0.2, -0.3, -1.2, 0.8, 0.7, 0.4, 0.3, 0.9},
                                     8);
  return t;
}
const at::Tensor& labels() {
  static const at::Tensor t = longs({0, 1, 2, 1, 0, 0, 2, 2});
  return t;
}
const at::Tensor& probabilities() {
  static const at::Tensor t = floats({0.7, 0.2, 0.1, 0.1, 0.8, 0.1, 0.0, 0.25, 0.75, 0.3, 0.6, 0.1,  //
                                      0.5, 0.5, 0.0, 0.9, 0.05, 0.05, 0.2, 0.2, 0.6, 1.f / 3, 1.f / 3, 1.f / 3},
                                     8);
  return t;
}
const at::Tensor y = floats({3.0, -0.5, 2.0, 7.0, 1.0, -2.0, 0.5, 4.0});
const at::Tensor p = floats({2.5, 0.0, 2.0, 8.0, 2.5, -1.8, -0.5, 4.3});
const at::Tensor z = floats({1.5, -0.3, 0.2, -2.0, 0.7, -0.1, 2.2, -0.9});
const at::Tensor b = floats({1, 0, 0, 0, 1, 1, 1, 0});

// The values below were printed by this script (/usr/bin/python3, torch 1.13, float64):
//   import torch, torch.nn.functional as F
//   L = torch.tensor([[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [-0.5, 0.2, 2.2], [1.2, 1.1, 0.0],
//                     [-0.8, 0.1, 0.5], [3.0, 0.2, -0.3], [-1.2, 0.8, 0.7], [0.4, 0.3, 0.9]], dtype=torch.float64)
//   t = torch.tensor([0, 1, 2, 1, 0, 0, 2, 2])
//   P = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.0, 0.25, 0.75], [0.3, 0.6, 0.1],
//                     [0.5, 0.5, 0.0], [0.9, 0.05, 0.05], [0.2, 0.2, 0.6], [1/3, 1/3, 1/3]], dtype=torch.float64)
//   y = torch.tensor([3.0, -0.5, 2.0, 7.0, 1.0, -2.0, 0.5, 4.0], dtype=torch.float64)
//   p = torch.tensor([2.5, 0.0, 2.0, 8.0, 2.5, -1.8, -0.5, 4.3], dtype=torch.float64)
//   z = torch.tensor([1.5, -0.3, 0.2, -2.0, 0.7, -0.1, 2.2, -0.9], dtype=torch.float64)
//   b = torch.tensor([1, 0, 0, 0, 1, 1, 1, 0], dtype=torch.float64)
//   print(F.cross_entropy(L, t).item(), F.cross_entropy(L, t, label_smoothing=0.1).item())
//   print(F.cross_entropy(L, P).item(), F.cross_entropy(L, P, label_smoothing=0.1).item())
//   print(F.mse_loss(p, y).item(), F.l1_loss(p, y).item())
//   print(F.smooth_l1_loss(p, y, beta=1.0).item(), F.smooth_l1_loss(p, y, beta=0.5).item())
//   print(F.binary_cross_entropy_with_logits(z, b).item())
constexpr double kCeIndex = 0.6740154886750198;
constexpr double kCeIndexSmoothed = 0.7556821553416865;
constexpr double kCeProbabilities = 0.9267238220083531;
constexpr double kCeProbabilitiesSmoothed = 0.9831196553416865;
constexpr double kMse = 0.61;
constexpr double kL1 = 0.625;
constexpr double kSmoothL1Beta1 = 0.289375;
constexpr double kSmoothL1Beta05 = 0.4225;
constexpr double kBce = 0.40933191329195706;

doctest::Approx near(double expected) { return doctest::Approx(expected).epsilon(1e-6); }


TEST_SUITE("losses") {
  TEST_CASE("all five losses are registered with a description") {
    const Components c = registered();
    for (const auto* name : {"cross_entropy", "mse", "l1", "smooth_l1", "bce_with_logits"}) {
      CAPTURE(name);
      const auto* entry = c.losses.find(name);
      REQUIRE(entry != nullptr);
      CHECK_FALSE(entry->description.empty());
    }
    CHECK(c.losses.names().size() == 5);
  }

  TEST_CASE("hand-computed small cases") {
    // cross entropy of logits [0, 0] is ln 2 whatever the class; of [ln 3, 0] for class 0, -ln(3/4).
    const at::Tensor two = floats({0.f, 0.f, static_cast<float>(std::log(3.0)), 0.f}, 2);
    CHECK(value(loss("cross_entropy", "", classes(2))(two, longs({1, 0}))) ==
          near((std::log(2.0) + std::log(4.0 / 3.0)) / 2));
    // probabilities [0.5, 0.5] against logits [ln 3, 0]: -(0.5 ln(3/4) + 0.5 ln(1/4)) = 0.5 ln(16/3).
    CHECK(value(loss("cross_entropy", "", classes(2))(two.slice(0, 1), floats({0.5f, 0.5f}, 1))) ==
          near(0.5 * std::log(16.0 / 3.0)));
    // label smoothing 0.2 over 2 classes: the target [1, 0] becomes [0.9, 0.1]; logits [0, 0] still give ln 2.
    CHECK(value(loss("cross_entropy", "label_smoothing = 0.2", classes(2))(two.slice(0, 0, 1), longs({0}))) ==
          near(std::log(2.0)));

    const at::Tensor out = floats({1.0, 2.0, 4.0}), target = floats({1.5, 0.0, 4.0});  // errors -0.5, 2, 0
    CHECK(value(loss("mse")(out, target)) == near((0.25 + 4.0 + 0.0) / 3));
    CHECK(value(loss("l1")(out, target)) == near((0.5 + 2.0 + 0.0) / 3));
    // smooth_l1, beta 1: |d| < 1 gives 0.5 d² / beta, else |d| - 0.5 beta: 0.125, 1.5, 0.
    CHECK(value(loss("smooth_l1")(out, target)) == near((0.125 + 1.5 + 0.0) / 3));
    // beta 4: all three below it: 0.5 * 0.25 / 4, 0.5 * 4 / 4, 0.
    CHECK(value(loss("smooth_l1", "beta = 4.0")(out, target)) == near((0.03125 + 0.5 + 0.0) / 3));
    // bce of logit 0 is ln 2 for either target; of logit ln 3 against 1, -ln(3/4); against 0, -ln(1/4).
    const at::Tensor logit = floats({0.f, static_cast<float>(std::log(3.0)), static_cast<float>(std::log(3.0))});
    CHECK(value(loss("bce_with_logits")(logit, floats({1, 1, 0}))) ==
          near((std::log(2.0) + std::log(4.0 / 3.0) + std::log(4.0)) / 3));
  }

  TEST_CASE("cross entropy matches torch.nn.functional.cross_entropy") {
    CHECK(value(loss("cross_entropy", "", classes(3))(logits(), labels())) == near(kCeIndex));
    CHECK(value(loss("cross_entropy", "label_smoothing = 0.1", classes(3))(logits(), labels())) ==
          near(kCeIndexSmoothed));
    CHECK(value(loss("cross_entropy", "", classes(3))(logits(), probabilities())) == near(kCeProbabilities));
    CHECK(value(loss("cross_entropy", "label_smoothing = 0.1", classes(3))(logits(), probabilities())) ==
          near(kCeProbabilitiesSmoothed));
    // int32 class indices are taken too
    CHECK(value(loss("cross_entropy", "", classes(3))(logits(), labels().to(at::kInt))) == near(kCeIndex));
  }

  TEST_CASE("the regression and binary losses match torch.nn.functional") {
    CHECK(value(loss("mse")(p, y)) == near(kMse));
    CHECK(value(loss("l1")(p, y)) == near(kL1));
    CHECK(value(loss("smooth_l1")(p, y)) == near(kSmoothL1Beta1));
    CHECK(value(loss("smooth_l1", "beta = 0.5")(p, y)) == near(kSmoothL1Beta05));
    CHECK(value(loss("bce_with_logits", "", classes(2))(z, b)) == near(kBce));
    // integer 0/1 targets are converted to float
    CHECK(value(loss("bce_with_logits", "", classes(2))(z, b.to(at::kLong))) == near(kBce));
  }

  TEST_CASE("outputs [N, 1] against targets [N] are viewed as [N]; other mismatches name both shapes") {
    CHECK(value(loss("mse")(p.reshape({8, 1}), y)) == near(kMse));
    CHECK(value(loss("l1")(p, y.reshape({8, 1}))) == near(kL1));
    CHECK(value(loss("bce_with_logits")(z.reshape({8, 1}), b)) == near(kBce));
    // (ATen would broadcast [8, 1] against [8] to an [8, 8] difference, whose mean is not kMse.)

    const std::string text = test::error_text([&] { loss("mse")(p.reshape({4, 2}), y.slice(0, 0, 4)); });
    CHECK(text.find("[4, 2]") != std::string::npos);
    CHECK(text.find("[4]") != std::string::npos);
    const std::string transposed = test::error_text([&] { loss("l1")(p.reshape({2, 4}), y.reshape({4, 2})); });
    CHECK(transposed.find("[2, 4]") != std::string::npos);
    CHECK(transposed.find("[4, 2]") != std::string::npos);
    const std::string ce = test::error_text([&] { loss("cross_entropy", "", classes(3))(logits(), longs({0, 1})); });
    CHECK(ce.find("[8, 3]") != std::string::npos);
    CHECK(ce.find("[2]") != std::string::npos);
    const std::string soft =
        test::error_text([&] { loss("cross_entropy", "", classes(3))(logits(), probabilities().slice(1, 0, 2)); });
    CHECK(soft.find("[8, 2]") != std::string::npos);
  }

  TEST_CASE("bfloat16 and float16 outputs give a float32 loss") {
    for (const auto type : {at::kBFloat16, at::kHalf}) {
      CAPTURE(type);
      const at::Tensor ce = loss("cross_entropy", "", classes(3))(logits().to(type), labels());
      CHECK((ce.scalar_type() == at::kFloat));
      CHECK(value(ce) == doctest::Approx(kCeIndex).epsilon(1e-2));  // the logits themselves were rounded
      const at::Tensor soft = loss("cross_entropy", "", classes(3))(logits().to(type), probabilities());
      CHECK((soft.scalar_type() == at::kFloat));
      for (const auto* name : {"mse", "l1", "smooth_l1"}) {
        CAPTURE(name);
        CHECK((loss(name)(p.to(type), y).scalar_type() == at::kFloat));
      }
      CHECK((loss("bce_with_logits")(z.to(type), b).scalar_type() == at::kFloat));
    }
    // the loss keeps the graph back to the bfloat16 outputs
    const at::Tensor out = p.to(at::kBFloat16).requires_grad_();
    loss("mse")(out, y).backward();
    REQUIRE(out.grad().defined());
    CHECK((out.grad().scalar_type() == at::kBFloat16));
  }

  TEST_CASE("loss keys are checked") {
    const auto beta = test::error_text<ConfigError>([] { loss("smooth_l1", "beta = 0"); });
    CHECK(beta.find("smooth_l1.beta") != std::string::npos);
    CHECK(beta.find("> 0") != std::string::npos);
    CHECK(test::error_text<ConfigError>([] { loss("smooth_l1", "beta = -1.5"); }).find("smooth_l1.beta") !=
          std::string::npos);
    const auto smoothing =
        test::error_text<ConfigError>([] { loss("cross_entropy", "label_smoothing = 1.0", classes(3)); });
    CHECK(smoothing.find("cross_entropy.label_smoothing") != std::string::npos);
    const auto unknown = test::error_text<ConfigError>([] { loss("mse", "beta = 1.0"); });
    CHECK(unknown.find("beta") != std::string::npos);  // mse has no keys: reject_unread names it
    const auto regression_ce = test::error_text<ConfigError>([] { loss("cross_entropy", "", regression()); });
    CHECK(regression_ce.find("cross_entropy.name") != std::string::npos);
    CHECK(regression_ce.find("13 inputs, 1 regression target") != std::string::npos);
    // The elementwise losses on class indices: refused when built, which `baton check` does (issue 24 §6).
    for (const std::string name : {"mse", "l1", "smooth_l1"}) {
      const auto on_classes = test::error_text<ConfigError>([&] { loss(name.c_str(), "", classes(10)); });
      CHECK(on_classes.find(name + ".name: " + name + " compares outputs with values, but the data's 'targets' are "
                            "class indices (10 classes): use cross_entropy") != std::string::npos);
    }
  }
}

}  // namespace losses_test
