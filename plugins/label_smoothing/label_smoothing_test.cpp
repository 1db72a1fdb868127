#include "baton_test.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ops/tensor.h>

#include "algorithm_test_support.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace label_smoothing_test {

using namespace algorithm_test;

namespace {

baton::TrainerOptions one_epoch() {
  auto o = quiet_options();
  o.max_duration = Time(1, TimeUnit::epoch);
  o.eval_interval = Time(0, TimeUnit::epoch);
  o.save_interval = Time(0, TimeUnit::epoch);
  return o;
}

// The smoothed cross entropy by the paper's formula, per row:
//   -(1 - a) log p_y - (a / C) sum_c log p_c,   p = softmax(logits)
double smoothed_loss(const Rows& logits, const std::vector<std::int64_t>& labels, double a) {
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    double z = 0;
    for (double v : logits[i]) z += std::exp(v);
    const double classes = static_cast<double>(logits[i].size());
    double sum_log_p = 0;
    for (double v : logits[i]) sum_log_p += v - std::log(z);
    total += -(1 - a) * (logits[i][static_cast<std::size_t>(labels[i])] - std::log(z)) - a / classes * sum_log_p;
  }
  return total / static_cast<double>(logits.size());
}

}  // namespace

TEST_SUITE("label_smoothing_plugin") {
  TEST_CASE("on a known batch the targets are (1 - a) onehot + a / C, put back after the loss") {
    auto plugin = load("smoothing = 0.3", "label_smoothing");
    auto& algorithm = dynamic_cast<baton::Algorithm&>(*plugin.plugin);
    RecordingLogger logger;
    baton::State state;
    state.outputs = at::tensor({2.0, 0.0, 0.0, 0.0, 1.0, 0.0}).reshape({2, 3});
    state.batch = baton::Batch::of(at::tensor({1.0, 2.0}).reshape({2, 1}), at::tensor(std::vector<std::int64_t>{0, 2}));
    baton::run_subscribed(algorithm, Event::before_loss, state, logger);
    // 0.7 * onehot + 0.1, written out.
    CHECK(max_abs_difference(values_of(state.batch.targets()), {0.8, 0.1, 0.1, 0.1, 0.1, 0.8}) < 1e-7);
    // Row 0: -(0.8 log p0 + 0.1 log p1 + 0.1 log p2), p = softmax(2, 0, 0) = (e^2, 1, 1) / (e^2 + 2).
    // Row 1: -(0.1 log q0 + 0.1 log q1 + 0.8 log q2), q = (1, e, 1) / (e + 2).
    const double z0 = std::exp(2.0) + 2, z1 = std::exp(1.0) + 2;
    const double row0 = -(0.8 * (2 - std::log(z0)) + 0.2 * (-std::log(z0)));
    const double row1 = -(0.1 * (1 - std::log(z1)) + 0.9 * (-std::log(z1)));
    const double expected = (row0 + row1) / 2;
    CHECK(std::abs(hand_cross_entropy(rows_of(state.outputs.main()), rows_of(state.batch.targets())) - expected) < 1e-6);
    state.loss = at::tensor(1.0);
    baton::run_subscribed(algorithm, Event::after_loss, state, logger);
    CHECK((state.batch.targets().scalar_type() == at::kLong));
    CHECK(labels_of(state.batch.targets()) == std::vector<std::int64_t>{0, 2});
  }

  TEST_CASE("target_key smooths that field alone, and puts it back") {
    auto plugin = load("smoothing = 0.3\ntarget_key = \"labels\"", "label_smoothing");
    auto& algorithm = dynamic_cast<baton::Algorithm&>(*plugin.plugin);
    RecordingLogger logger;
    baton::State state;
    state.outputs = at::zeros({2, 3});
    const at::Tensor labels = at::tensor(std::vector<std::int64_t>{0, 2});
    const at::Tensor targets = at::tensor(std::vector<std::int64_t>{1, 1});
    state.batch = baton::Batch{{"labels", labels}, {"targets", targets}};
    baton::run_subscribed(algorithm, Event::before_loss, state, logger);
    CHECK(max_abs_difference(values_of(state.batch["labels"]), {0.8, 0.1, 0.1, 0.1, 0.1, 0.8}) < 1e-7);
    CHECK(state.batch.targets().equal(targets));
    state.loss = at::tensor(1.0);
    baton::run_subscribed(algorithm, Event::after_loss, state, logger);
    CHECK(state.batch["labels"].equal(labels));
  }

  TEST_CASE("in a run the loss is the smoothed cross entropy; other events see the class targets") {
    for (double a : {0.1, 0.5}) {
      CAPTURE(a);
      Records records = train_probed("smoothing = " + std::to_string(a), "label_smoothing", one_epoch());
      REQUIRE(records.size() == 3);
      for (const auto& [batch, r] : records) {
        CAPTURE(batch);
        const auto labels = labels_of(r.drawn_targets);
        const Rows logits = rows_of(r.outputs[0]);
        CHECK(std::abs(r.losses[0].item<double>() - smoothed_loss(logits, labels, a)) < 1e-5);
        // The unsmoothed loss differs by more than the tolerance: the check can tell them apart.
        CHECK(std::abs(r.losses[0].item<double>() - smoothed_loss(logits, labels, 0)) > 1e-3);
        CHECK(r.loss_targets[0].dim() == 2);
        CHECK((r.targets_after_loss[0].scalar_type() == at::kLong));
        CHECK(labels_of(r.targets_after_loss[0]) == labels);
      }
    }
  }

  TEST_CASE("the default smoothing is Composer's 0.1") {
    Records records = train_probed("", "label_smoothing", one_epoch());
    const auto& r = records.at(0);
    CHECK(std::abs(r.losses[0].item<double>() - smoothed_loss(rows_of(r.outputs[0]), labels_of(r.drawn_targets), 0.1)) <
          1e-5);
  }

  TEST_CASE("bad keys are configuration errors at their line") {
    const std::string error = config_error("\nsmoothing = 1.5", "label_smoothing");
    CHECK(contains(error, "run.toml:2"));
    CHECK(contains(error, "plugins.label_smoothing.smoothing: must be in [0, 1], got 1.5"));
    CHECK(contains(config_error("smoothing = \"a lot\"", "label_smoothing"), "plugins.label_smoothing.smoothing"));
    CHECK(contains(config_error("smooth = 0.1", "label_smoothing"), "unknown key 'smooth'"));
  }
}

}  // namespace label_smoothing_test
