#include "baton_test.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "baton/components.h"
#include "baton/error.h"
#include "components/builtins.h"
#include "error_text.h"

using namespace baton;

namespace {

// One batch of outputs against targets (a batch of the targets alone).
void feed(Metric& metric, const at::Tensor& outputs, const at::Tensor& targets) {
  metric.update(Outputs(outputs), Batch::of(at::Tensor(), targets));
}

DataSpec classes(std::int64_t n) { return DataSpec{{4}, {}, n, {}}; }
DataSpec regression(std::int64_t columns = 1) {
  return DataSpec{{13}, columns == 1 ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{columns}, 0, {}};
}

std::unique_ptr<Metric> make(const std::string& name, const DataSpec& data, const std::string& toml = "") {
  Components c;
  register_builtin_losses(c);
  register_builtin_metrics(c);
  const auto* entry = c.metrics.find(name);
  REQUIRE(entry != nullptr);
  const PluginConfig config = PluginConfig::from_toml(toml, name);
  auto metric = entry->factory(config, data);
  config.reject_unread();  // every key given was read
  REQUIRE(metric != nullptr);
  return metric;
}

/// One metric object over the whole batch.
double over(Metric& metric, const at::Tensor& outputs, const at::Tensor& targets) {
  metric.reset();
  feed(metric, outputs, targets);
  return metric.compute(metric.sums());
}

at::Tensor floats(const std::vector<float>& v) { return at::tensor(v); }
at::Tensor floats(const std::vector<float>& v, std::int64_t rows) { return at::tensor(v).reshape({rows, -1}); }
at::Tensor longs(const std::vector<std::int64_t>& v) { return at::tensor(v); }

// The fixed tensors shared with the Python script below.
at::Tensor logits() {  // 8x3; argmax per row: 0 1 2 0 2 0 1 2
  return floats({2.0, 0.5, -1.0, 0.1, 1.5, 0.3, -0.5, 0.2, 2.2, 1.2, 1.1, 0.0,  //
                 -0.8, 0.1, 0.5, 3.0, 0.2, -0.3, -1.2, 0.8, 0.7, 0.4, 0.3, 0.9},
                8);
}
at::Tensor labels() { return longs({0, 1, 2, 1, 0, 0, 2, 2}); }
at::Tensor binary_logits() { return floats({1.5, -0.3, 0.2, -2.0, 0.7, -0.1, 2.2, -0.9}); }  // > 0: 1 0 1 0 1 0 1 0
at::Tensor binary_labels() { return longs({1, 0, 0, 0, 1, 1, 1, 0}); }
at::Tensor values() {  // 8x2 targets
  return floats({3.0, 0.5, -0.5, 1.0, 2.0, -6.0, 7.0, 2.0, 1.0, 0.0, -2.0, 3.5, 0.5, -1.0, 4.0, 2.5}, 8);
}
at::Tensor predictions() {  // 8x2 outputs
  return floats({2.5, 0.0, 0.0, 2.0, 2.0, -5.0, 8.0, 1.5, 2.5, 0.5, -1.8, 2.0, -0.5, -0.5, 4.3, 3.0}, 8);
}

// Printed by this script (/usr/bin/python3, torch 1.13; scikit-learn is not installed there, so r2 and f1 are
// scikit-learn's formulas written out):
//   import torch
//   L = torch.tensor([[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [-0.5, 0.2, 2.2], [1.2, 1.1, 0.0],
//                     [-0.8, 0.1, 0.5], [3.0, 0.2, -0.3], [-1.2, 0.8, 0.7], [0.4, 0.3, 0.9]])
//   t = torch.tensor([0, 1, 2, 1, 0, 0, 2, 2])
//   def f1(pred, true, labels):  # scikit-learn's f1_score per class: 2TP / (2TP + FP + FN)
//       out = []
//       for c in labels:
//           tp = ((pred == c) & (true == c)).sum().item(); fp = ((pred == c) & (true != c)).sum().item()
//           fn = ((pred != c) & (true == c)).sum().item(); out.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
//       return out
//   def macro(pred, true):  # labels=None: the classes present in true or pred
//       return sum(f1(pred, true, torch.unique(torch.cat([pred, true])).tolist())) / len(torch.unique(torch.cat([pred, true])))
//   pred = L.argmax(1)
//   print("accuracy", (pred == t).double().mean().item())
//   print("top2", (L.topk(2, 1).indices == t[:, None]).any(1).double().mean().item())
//   print("f1_macro", macro(pred, t), "halves", macro(pred[:4], t[:4]), macro(pred[4:], t[4:]))
//   z = torch.tensor([1.5, -0.3, 0.2, -2.0, 0.7, -0.1, 2.2, -0.9]); b = torch.tensor([1, 0, 0, 0, 1, 1, 1, 0])
//   zp = (z > 0).long()
//   print("f1_binary", f1(zp, b, [1])[0], "halves", f1(zp[:4], b[:4], [1])[0], f1(zp[4:], b[4:], [1])[0])
//   def r2(yhat, y):  # scikit-learn's r2_score, multioutput="uniform_average"
//       y, yhat = y.double().reshape(len(y), -1), yhat.double().reshape(len(y), -1)
//       res = ((y - yhat) ** 2).sum(0); tot = ((y - y.mean(0)) ** 2).sum(0)
//       return torch.where(tot != 0, 1 - res / tot, torch.where(res == 0, 1.0, 0.0).double()).mean().item()
//   Y = torch.tensor([[3.0, 0.5], [-0.5, 1.0], [2.0, -6.0], [7.0, 2.0], [1.0, 0.0], [-2.0, 3.5], [0.5, -1.0], [4.0, 2.5]])
//   Yh = torch.tensor([[2.5, 0.0], [0.0, 2.0], [2.0, -5.0], [8.0, 1.5], [2.5, 0.5], [-1.8, 2.0], [-0.5, -0.5], [4.3, 3.0]])
//   print("r2_2col", r2(Yh, Y), "halves", r2(Yh[:4], Y[:4]), r2(Yh[4:], Y[4:]))
//   print("r2_col0", r2(Yh[:, 0], Y[:, 0]))
//   print("mae_col0", (Yh[:, 0] - Y[:, 0]).abs().double().mean().item(), "rmse_col0", ((Yh[:, 0] - Y[:, 0]).double() ** 2).mean().sqrt().item())
//   print("mae_2col", (Yh - Y).abs().double().mean().item(), "rmse_2col", ((Yh - Y).double() ** 2).mean().sqrt().item())
// Output:
//   accuracy 0.625
//   top2 0.875
//   f1_macro 0.611111111111111 halves 0.7777777777777777 0.38888888888888884
//   f1_binary 0.75 halves 0.6666666666666666 0.8
//   r2_2col 0.9100795760761673 halves 0.942808005530358 0.7938714869603758
//   r2_col0 0.9118735867536896
//   mae_col0 0.6250000298023224 rmse_col0 0.7810249782748983
//   mae_2col 0.6875000149011612 rmse_2col 0.8054501898594678
constexpr double kAccuracy = 0.625;
constexpr double kTop2 = 0.875;
constexpr double kF1Macro = 0.611111111111111;
constexpr double kF1MacroHalves[2] = {0.7777777777777777, 0.38888888888888884};
constexpr double kF1Binary = 0.75;
constexpr double kF1BinaryHalves[2] = {0.6666666666666666, 0.8};
constexpr double kR2TwoColumns = 0.9100795760761673;
constexpr double kR2TwoColumnsHalves[2] = {0.942808005530358, 0.7938714869603758};
constexpr double kR2Column0 = 0.9118735867536896;
constexpr double kMaeColumn0 = 0.6250000298023224, kRmseColumn0 = 0.7810249782748983;
constexpr double kMaeTwoColumns = 0.6875000149011612, kRmseTwoColumns = 0.8054501898594678;

doctest::Approx near(double expected) { return doctest::Approx(expected).epsilon(1e-6); }

std::vector<double> added(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

/// Two "ranks" each updating with half the batch, their sums added: {combined, mean of the two halves' values}.
std::pair<double, double> split(const std::string& name, const DataSpec& data, const at::Tensor& outputs,
                                const at::Tensor& targets, const std::string& toml = "") {
  auto first = make(name, data, toml), second = make(name, data, toml);
  const std::int64_t half = outputs.size(0) / 2;
  feed(*first, outputs.slice(0, 0, half), targets.slice(0, 0, half));
  feed(*second, outputs.slice(0, half), targets.slice(0, half));
  const double mean = (first->compute(first->sums()) + second->compute(second->sums())) / 2;
  return {first->compute(added(first->sums(), second->sums())), mean};
}

}  // namespace

TEST_SUITE("metrics") {
  TEST_CASE("the six metrics are registered with a description and a direction") {
    Components c;
    register_builtin_metrics(c);
    CHECK(c.metrics.names() == std::vector<std::string>{"accuracy", "f1", "mae", "r2", "rmse", "top_k"});
    for (const auto* entry : c.metrics.entries()) CHECK_FALSE(entry->description.empty());
    CHECK(make("accuracy", classes(3))->higher_is_better());
    CHECK(make("top_k", classes(10))->higher_is_better());
    CHECK(make("f1", classes(3))->higher_is_better());
    CHECK(make("r2", regression())->higher_is_better());
    CHECK_FALSE(make("mae", regression())->higher_is_better());
    CHECK_FALSE(make("rmse", regression())->higher_is_better());
  }

  TEST_CASE("accuracy: hand-computed and cross-checked") {
    auto accuracy = make("accuracy", classes(3));
    // argmax 0 1 2 0 2 0 1 2 against 0 1 2 1 0 0 2 2: rows 0, 1, 2, 5, 7 right: 5 / 8
    CHECK(over(*accuracy, logits(), labels()) == near(5.0 / 8));
    CHECK(over(*accuracy, logits(), labels()) == near(kAccuracy));
    CHECK(accuracy->sums() == std::vector<double>{5, 8});
    // class probabilities (after MixUp): their argmax is the class; one-hot rows of the labels give the same
    const at::Tensor one_hot = floats({0.6, 0.3, 0.1, 0.2, 0.5, 0.3, 0.1, 0.1, 0.8, 0.3, 0.4, 0.3,  //
                                       0.5, 0.2, 0.3, 0.9, 0.0, 0.1, 0.3, 0.3, 0.4, 0.0, 0.45, 0.55},
                                      8);
    CHECK(over(*accuracy, logits(), one_hot) == near(5.0 / 8));
    // int32 indices on two batches accumulate: 5 + 1 (a second batch of two rows, one right) over 10
    accuracy->reset();
    feed(*accuracy, logits(), labels().to(at::kInt));
    feed(*accuracy, floats({1, 0, 0, 1}, 2), longs({0, 0}));
    CHECK(accuracy->compute(accuracy->sums()) == near(6.0 / 10));
    // a single logit per sample (binary): > 0 is class 1: 1 0 1 0 1 0 1 0 against 1 0 0 0 1 1 1 0: 6 / 8 right
    auto binary = make("accuracy", classes(2));
    CHECK(over(*binary, binary_logits().reshape({8, 1}), binary_labels()) == near(6.0 / 8));
  }

  TEST_CASE("top_k: hand-computed and cross-checked") {
    // k = 1 is accuracy; k = 2 misses only row 4 ([-0.8, 0.1, 0.5], class 0 is its lowest); k = 3 never misses
    CHECK(over(*make("top_k", classes(3), "k = 1"), logits(), labels()) == near(5.0 / 8));
    CHECK(over(*make("top_k", classes(3), "k = 2"), logits(), labels()) == near(7.0 / 8));
    CHECK(over(*make("top_k", classes(3), "k = 2"), logits(), labels()) == near(kTop2));
    CHECK(over(*make("top_k", classes(3), "k = 3"), logits(), labels()) == near(1.0));
    auto top5 = make("top_k", classes(6));  // the default k = 5 of 6 classes: only the lowest-scored class misses
    CHECK(over(*top5, floats({6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6}, 2), longs({5, 5})) == near(1.0 / 2));
  }

  TEST_CASE("mae and rmse: hand-computed and cross-checked") {
    const at::Tensor y = values().select(1, 0).contiguous(), p = predictions().select(1, 0).contiguous();
    // errors 0.5 0.5 0 1 1.5 0.2 1 0.3: |sum| 5.0, square sum 0.25+0.25+0+1+2.25+0.04+1+0.09 = 4.88
    CHECK(over(*make("mae", regression()), p, y) == near(5.0 / 8));
    CHECK(over(*make("rmse", regression()), p, y) == near(std::sqrt(4.88 / 8)));
    CHECK(over(*make("mae", regression()), p, y) == near(kMaeColumn0));
    CHECK(over(*make("rmse", regression()), p, y) == near(kRmseColumn0));
    // outputs [N, 1] against targets [N]
    CHECK(over(*make("mae", regression()), p.reshape({8, 1}), y) == near(kMaeColumn0));
    CHECK(over(*make("rmse", regression()), p.reshape({8, 1}), y) == near(kRmseColumn0));
    // two columns: over all 16 values
    CHECK(over(*make("mae", regression(2)), predictions(), values()) == near(kMaeTwoColumns));
    CHECK(over(*make("rmse", regression(2)), predictions(), values()) == near(kRmseTwoColumns));
    // bfloat16 outputs of exactly representable values: [1, 2] against [0, 4]: errors 1, 2
    CHECK(over(*make("rmse", regression()), floats({1, 2}).to(at::kBFloat16), floats({0, 4})) ==
          near(std::sqrt(5.0 / 2)));
    // a mismatch names both shapes
    const auto text = test::error_text([&] { feed(*make("mae", regression()), predictions(), y); });
    CHECK(text.find("[8, 2]") != std::string::npos);
    CHECK(text.find("[8]") != std::string::npos);
  }

  TEST_CASE("r2: hand-computed, cross-checked, constant columns as scikit-learn") {
    auto r2 = make("r2", regression());
    // scikit-learn's docstring example: y [3, -0.5, 2, 7], predictions [2.5, 0, 2, 8]. Mean 2.875;
    // SS_tot = 0.125² + 3.375² + 0.875² + 4.125² = 29.1875; SS_res = 0.25 + 0.25 + 0 + 1 = 1.5.
    CHECK(over(*r2, floats({2.5, 0.0, 2, 8}), floats({3, -0.5, 2, 7})) == near(1 - 1.5 / 29.1875));
    CHECK(over(*r2, predictions().select(1, 0), values().select(1, 0)) == near(kR2Column0));
    CHECK(over(*r2, predictions().select(1, 0).reshape({8, 1}), values().select(1, 0)) == near(kR2Column0));
    CHECK(r2->sums().size() == 4);

    auto two = make("r2", regression(2));
    CHECK(two->sums().size() == 8);
    CHECK(over(*two, predictions(), values()) == near(kR2TwoColumns));

    // A constant target column: 1.0 when predicted exactly, else 0.0; averaged with column 0 (y [3, -0.5, 2, 7, 1],
    // predictions [2.5, 0, 2, 8, 1]: mean 2.5, SS_tot = 0.25 + 9 + 0.25 + 20.25 + 2.25 = 32, SS_res = 1.5).
    // Five float64 0.1s do not cancel: Σy² - (Σy)²/5 = 6.9e-18, not 0, and 1 - SS_res / 6.9e-18 would be -1.4e15.
    const auto doubles = [](std::vector<double> v) { return at::tensor(v).reshape({5, 2}); };
    const at::Tensor y = doubles({3, 0.1, -0.5, 0.1, 2, 0.1, 7, 0.1, 1, 0.1});
    const at::Tensor exact = doubles({2.5, 0.1, 0.0, 0.1, 2, 0.1, 8, 0.1, 1, 0.1});
    const at::Tensor off = doubles({2.5, 0.2, 0.0, 0.1, 2, 0.1, 8, 0.1, 1, 0.1});
    CHECK(over(*two, exact, y) == near((1 - 1.5 / 32 + 1.0) / 2));
    CHECK(over(*two, off, y) == near((1 - 1.5 / 32 + 0.0) / 2));
    // a constant column of zeros (Σy² = 0 too)
    CHECK(over(*make("r2", regression()), floats({0, 0, 0}), floats({0, 0, 0})) == 1.0);
    CHECK(over(*make("r2", regression()), floats({0, 1, 0}), floats({0, 0, 0})) == 0.0);
    // fewer than two samples: not defined (scikit-learn returns nan)
    CHECK(std::isnan(over(*r2, floats({1}), floats({2}))));
  }

  TEST_CASE("f1: hand-computed and cross-checked") {
    // predictions 0 1 2 0 2 0 1 2 against 0 1 2 1 0 0 2 2:
    //   class 0: TP 2 (rows 0, 5), FP 1 (row 3), FN 1 (row 4): 4 / 6
    //   class 1: TP 1 (row 1), FP 1 (row 6), FN 1 (row 3): 2 / 4
    //   class 2: TP 2 (rows 2, 7), FP 1 (row 4), FN 1 (row 6): 4 / 6      macro (2/3 + 1/2 + 2/3) / 3 = 11/18
    auto macro = make("f1", classes(3));
    CHECK(over(*macro, logits(), labels()) == near(11.0 / 18));
    CHECK(over(*macro, logits(), labels()) == near(kF1Macro));
    CHECK(macro->sums() == std::vector<double>{2, 1, 1, 1, 1, 1, 2, 1, 1});

    // binary, a single logit: predictions 1 0 1 0 1 0 1 0 against 1 0 0 0 1 1 1 0: TP 3, FP 1 (row 2), FN 1 (row 5):
    // 6 / 8. [N], [N, 1] and two scores per sample ([-z/2, z/2]: argmax is class 1 where z > 0) agree.
    auto binary = make("f1", classes(2));  // the default average with 2 classes is "binary"
    CHECK(over(*binary, binary_logits(), binary_labels()) == near(6.0 / 8));
    CHECK(over(*binary, binary_logits(), binary_labels()) == near(kF1Binary));
    CHECK(over(*binary, binary_logits().reshape({8, 1}), binary_labels().to(at::kFloat)) == near(kF1Binary));
    const at::Tensor scores = at::stack({binary_logits().mul(-0.5), binary_logits().mul(0.5)}, 1);
    CHECK(over(*binary, scores, binary_labels()) == near(kF1Binary));
    // macro over the same 2 classes: class 0: TP 3 (rows 1, 3, 7), FP 1 (row 5), FN 1 (row 2): 6 / 8 too
    CHECK(over(*make("f1", classes(2), "average = \"macro\""), binary_logits(), binary_labels()) == near(0.75));
    CHECK(over(*make("f1", classes(2), "average = \"macro\""), binary_logits(), longs({1, 1, 1, 1, 1, 1, 1, 1})) ==
          near((0.0 + 2.0 * 4 / (2 * 4 + 0 + 4)) / 2));  // class 0: TP 0, FP 4: F1 0; class 1: TP 4, FN 4: 2/3

    // binary with no positive target and no positive prediction: 0.0 (scikit-learn's zero_division default)
    CHECK(over(*binary, floats({-1, -2}), longs({0, 0})) == 0.0);
  }

  TEST_CASE("f1 macro leaves out a class absent from targets and predictions, as scikit-learn's labels=None") {
    // A fourth class that is never the target and never predicted (its score is far below): the macro mean stays
    // 11/18 over the three present classes; counting it as F1 0 would give 11/24.
    const at::Tensor four = at::cat({logits(), at::full({8, 1}, -10.0)}, 1);
    auto macro = make("f1", classes(4));
    CHECK(over(*macro, four, labels()) == near(11.0 / 18));
    CHECK(over(*macro, four, labels()) != doctest::Approx(11.0 / 24));
    CHECK(macro->sums().size() == 12);
  }

  TEST_CASE("data-parallel: adding two halves' sums gives the whole batch's value; a mean of halves does not") {
    {
      const auto [combined, mean] = split("r2", regression(2), predictions(), values());
      CHECK(combined == near(kR2TwoColumns));
      CHECK(mean == near((kR2TwoColumnsHalves[0] + kR2TwoColumnsHalves[1]) / 2));
      CHECK(mean != doctest::Approx(kR2TwoColumns).epsilon(1e-3));
    }
    {
      const auto [combined, mean] = split("f1", classes(3), logits(), labels());
      CHECK(combined == near(kF1Macro));
      CHECK(mean == near((kF1MacroHalves[0] + kF1MacroHalves[1]) / 2));
      CHECK(mean != doctest::Approx(kF1Macro).epsilon(1e-3));
    }
    {
      const auto [combined, mean] = split("f1", classes(2), binary_logits(), binary_labels());
      CHECK(combined == near(kF1Binary));
      CHECK(mean == near((kF1BinaryHalves[0] + kF1BinaryHalves[1]) / 2));
      CHECK(mean != doctest::Approx(kF1Binary).epsilon(1e-3));
    }
    {  // rmse too: the root of a pooled mean is no mean of roots
      const auto [combined, mean] = split("rmse", regression(2), predictions(), values());
      CHECK(combined == near(kRmseTwoColumns));
      CHECK(mean != doctest::Approx(kRmseTwoColumns).epsilon(1e-3));
    }
    CHECK(split("accuracy", classes(3), logits(), labels()).first == near(kAccuracy));
    CHECK(split("top_k", classes(3), logits(), labels(), "k = 2").first == near(kTop2));
    CHECK(split("mae", regression(2), predictions(), values()).first == near(kMaeTwoColumns));
  }

  TEST_CASE("reset zeroes the sums, whose count never changes") {
    for (const auto& [name, data, outputs, targets] :
         std::vector<std::tuple<std::string, DataSpec, at::Tensor, at::Tensor>>{
             {"accuracy", classes(3), logits(), labels()},
             {"top_k", classes(3), logits(), labels()},
             {"f1", classes(3), logits(), labels()},
             {"mae", regression(2), predictions(), values()},
             {"rmse", regression(2), predictions(), values()},
             {"r2", regression(2), predictions(), values()}}) {
      CAPTURE(name);
      auto metric = make(name, data, name == "top_k" ? "k = 2" : "");
      const auto empty = metric->sums();
      for (double s : empty) CHECK(s == 0.0);
      feed(*metric, outputs, targets);
      const auto once = metric->sums();
      CHECK(once.size() == empty.size());
      CHECK(once != empty);
      metric->reset();
      CHECK(metric->sums() == empty);
      feed(*metric, outputs, targets);
      CHECK(metric->sums() == once);
      // outputs that require grad (as a model gives them) are fine
      metric->reset();
      feed(*metric, outputs.clone().requires_grad_(), targets);
      CHECK(metric->sums() == once);
      CHECK_THROWS_AS(metric->compute({1.0}), Error);  // sums of another metric
    }
  }

  TEST_CASE("metric keys and data are checked") {
    const auto zero = test::error_text<ConfigError>([] { make("top_k", classes(10), "k = 0"); });
    CHECK(zero.find("top_k.k") != std::string::npos);
    CHECK(zero.find(">= 1") != std::string::npos);
    // k beyond the classes is refused (every sample would be a hit), the default k = 5 included
    const auto many = test::error_text<ConfigError>([] { make("top_k", classes(3), "k = 4"); });
    CHECK(many.find("top_k.k") != std::string::npos);
    CHECK(many.find("3 classes") != std::string::npos);
    const auto by_default = test::error_text<ConfigError>([] { make("top_k", classes(3)); });
    CHECK(by_default.find("(the default)") != std::string::npos);
    CHECK_NOTHROW(make("top_k", classes(3), "k = 3"));

    const auto micro = test::error_text<ConfigError>([] { make("f1", classes(3), "average = \"micro\""); });
    CHECK(micro.find("f1.average") != std::string::npos);
    const auto binary = test::error_text<ConfigError>([] { make("f1", classes(3), "average = \"binary\""); });
    CHECK(binary.find("f1.average") != std::string::npos);
    CHECK(binary.find("3 classes") != std::string::npos);
    CHECK_NOTHROW(make("f1", classes(2), "average = \"binary\""));

    for (const auto* name : {"accuracy", "top_k", "f1"}) {
      CAPTURE(name);
      const auto text = test::error_text<ConfigError>([&] { make(name, regression()); });
      CHECK(text.find(std::string(name) + ".name") != std::string::npos);
      CHECK(text.find("13 inputs, 1 regression target") != std::string::npos);
    }
    for (const auto* name : {"mae", "rmse", "r2"}) {
      CAPTURE(name);
      const auto text = test::error_text<ConfigError>([&] { make(name, classes(10)); });
      CHECK(text.find(std::string(name) + ".name") != std::string::npos);
      CHECK(text.find("10 classes") != std::string::npos);
    }
    // a key the metric does not have is left unread, which reject_unread reports
    CHECK(test::error_text<ConfigError>([] { make("accuracy", classes(3), "k = 2"); }).find("k") != std::string::npos);
  }
}
