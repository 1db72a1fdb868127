#include "baton_test.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/randn.h>

#include "algorithm_test_support.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace mixup_test {

using namespace algorithm_test;

namespace {

// For each mixed row i, the row j of the drawn batch with mixed_i == (1 - m) x_i + m x_j (the best fit, and how
// well it fits): recovers the permutation the plugin drew from the relation it must satisfy.
struct Pairing {
  std::vector<std::size_t> partner;
  double worst_fit = 0;        // max over i of the best fit's error
  double best_alternative = INFINITY;  // min over i of the error of any other j with x_j != x_partner
};

Pairing pair_rows(const Rows& drawn, const Rows& mixed, double m) {
  Pairing p;
  for (std::size_t i = 0; i < mixed.size(); ++i) {
    std::vector<double> errors(drawn.size());
    for (std::size_t j = 0; j < drawn.size(); ++j) {
      double e = 0;
      for (std::size_t k = 0; k < mixed[i].size(); ++k)
        e = std::max(e, std::abs(mixed[i][k] - ((1 - m) * drawn[i][k] + m * drawn[j][k])));
      errors[j] = e;
    }
    std::size_t best = 0;
    for (std::size_t j = 1; j < errors.size(); ++j)
      if (errors[j] < errors[best]) best = j;
    p.partner.push_back(best);
    p.worst_fit = std::max(p.worst_fit, errors[best]);
    for (std::size_t j = 0; j < errors.size(); ++j)
      if (j != best) p.best_alternative = std::min(p.best_alternative, errors[j]);
  }
  return p;
}

bool is_permutation(const std::vector<std::size_t>& p) {
  std::set<std::size_t> seen(p.begin(), p.end());
  return seen.size() == p.size() && *seen.rbegin() == p.size() - 1;
}

// (1 - m) onehot(y_i) + m onehot(y_partner(i)), by hand.
Rows mixed_targets(const std::vector<std::int64_t>& labels, const std::vector<std::size_t>& partner, double m,
                   std::size_t classes) {
  Rows out;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    std::vector<double> row(classes, 0.0);
    row[static_cast<std::size_t>(labels[i])] += 1 - m;
    row[static_cast<std::size_t>(labels[partner[i]])] += m;
    out.push_back(row);
  }
  return out;
}

std::vector<double> flat(const Rows& rows) {
  std::vector<double> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

baton::TrainerOptions one_epoch() {
  auto o = quiet_options();
  o.max_duration = Time(1, TimeUnit::epoch);
  o.eval_interval = Time(0, TimeUnit::epoch);
  o.save_interval = Time(0, TimeUnit::epoch);
  return o;
}

}  // namespace

TEST_SUITE("mixup_plugin") {
  TEST_CASE("inputs and targets are (1 - m) x + m x[perm] for the logged m and a permutation; the loss uses them") {
    Records records = train_probed("alpha = 1.0", "mixup", one_epoch());
    REQUIRE(records.size() == 3);
    std::set<double> mixings;
    for (const auto& [batch, r] : records) {
      CAPTURE(batch);
      REQUIRE(r.metrics.count("mixup/mixing"));
      const double m = r.metrics.at("mixup/mixing");
      mixings.insert(m);
      CHECK(m >= 0);
      CHECK(m <= 0.5);  // Composer's fold: min(z, 1 - z)
      const Pairing p = pair_rows(rows_of(r.drawn_inputs), rows_of(r.inputs), m);
      CHECK(p.worst_fit < 1e-5);
      CHECK(p.best_alternative > 1e-3);  // the relation tells the rows apart
      CHECK(is_permutation(p.partner));
      std::size_t moved = 0;
      for (std::size_t i = 0; i < p.partner.size(); ++i) moved += p.partner[i] != i;
      CHECK(moved > p.partner.size() / 2);

      REQUIRE(r.loss_targets.size() == 1);
      const at::Tensor& targets = r.loss_targets[0];
      CHECK(targets.dim() == 2);
      const Rows expected = mixed_targets(labels_of(r.drawn_targets), p.partner, m, 10);
      CHECK(max_abs_difference(values_of(targets), flat(expected)) < 1e-6);
      // The trainer's loss is the cross entropy against those targets.
      CHECK(std::abs(r.losses[0].item<double>() - hand_cross_entropy(rows_of(r.outputs[0]), expected)) < 1e-5);
    }
    CHECK(mixings.size() == 3);  // a new draw every batch
  }

  TEST_CASE("interpolate_loss keeps class targets and mixes the two cross entropies") {
    Records records = train_probed("alpha = 1.0\ninterpolate_loss = true", "mixup", one_epoch());
    for (const auto& [batch, r] : records) {
      CAPTURE(batch);
      const double m = r.metrics.at("mixup/mixing");
      const Pairing p = pair_rows(rows_of(r.drawn_inputs), rows_of(r.inputs), m);
      REQUIRE(p.worst_fit < 1e-5);
      CHECK((r.loss_targets[0].scalar_type() == at::kLong));
      const auto labels = labels_of(r.drawn_targets);
      Rows own, other;
      for (std::size_t i = 0; i < labels.size(); ++i) {
        own.push_back(one_hot(labels[i], 10));
        other.push_back(one_hot(labels[p.partner[i]], 10));
      }
      const Rows logits = rows_of(r.outputs[0]);
      const double expected = (1 - m) * hand_cross_entropy(logits, own) + m * hand_cross_entropy(logits, other);
      CHECK(std::abs(r.losses[0].item<double>() - expected) < 1e-5);
    }
  }

  TEST_CASE("with microbatches each before_loss gets its rows of the whole batch's mixed targets") {
    auto options = one_epoch();
    options.microbatch_size = 8;
    Records records = train_probed("alpha = 1.0", "mixup", options, "mlp");
    for (const auto& [batch, r] : records) {
      CAPTURE(batch);
      REQUIRE(r.loss_targets.size() == 4);
      const double m = r.metrics.at("mixup/mixing");
      const Pairing p = pair_rows(rows_of(r.drawn_inputs), rows_of(r.inputs), m);
      REQUIRE(p.worst_fit < 1e-5);
      const at::Tensor joined = at::cat(r.loss_targets);
      CHECK(max_abs_difference(values_of(joined), flat(mixed_targets(labels_of(r.drawn_targets), p.partner, m, 10))) <
            1e-6);
    }
  }

  TEST_CASE("the mixing follows min(z, 1 - z), z ~ Beta(alpha, alpha); alpha = 0 leaves the batch alone") {
    // Beta(1, 1) is uniform: min(U, 1 - U) is uniform on [0, 0.5], mean 1/4, variance 1/48.
    auto plugin = load("alpha = 1.0", "mixup");
    auto& algorithm = dynamic_cast<baton::Algorithm&>(*plugin.plugin);
    RecordingLogger logger;
    baton::State state;
    state.facts.set_seed(17);
    const int draws = 400;
    double sum = 0;
    int below_eighth = 0;
    for (int b = 0; b < draws; ++b) {
      state.progress.now.batch = b;
      state.batch = baton::Batch::of(at::randn({4, 3}), at::arange(4));
      baton::run_subscribed(algorithm, Event::after_dataloader, state, logger);
      const double m = logger.last("mixup/mixing");
      sum += m;
      below_eighth += m < 0.125;
    }
    // 4 standard errors: sqrt(1/48 / 400) = 0.0072; P(m < 1/8) = 1/4, standard error 0.022.
    CHECK(std::abs(sum / draws - 0.25) < 0.029);
    CHECK(std::abs(below_eighth / static_cast<double>(draws) - 0.25) < 0.087);

    auto off = load("alpha = 0", "mixup");
    state.progress.now.batch = 3;
    const at::Tensor x = at::randn({4, 3});
    state.batch = baton::Batch::of(x, at::arange(4));
    baton::run_subscribed(*off.plugin, Event::after_dataloader, state, logger);
    CHECK(logger.last("mixup/mixing") == 0.0);
    CHECK(max_abs_difference(values_of(state.batch.inputs()), values_of(x)) == 0.0);
  }

  TEST_CASE("the same seed and batch draw the same mixing; another seed or batch draws another") {
    auto plugin = load("", "mixup");
    auto& algorithm = dynamic_cast<baton::Algorithm&>(*plugin.plugin);
    RecordingLogger logger;
    auto draw = [&](std::uint64_t seed, std::int64_t batch) {
      baton::State state;
      state.facts.set_seed(seed);
      state.progress.now.batch = batch;
      state.batch = baton::Batch::of(at::randn({8, 2}), at::arange(8));
      baton::run_subscribed(algorithm, Event::after_dataloader, state, logger);
      return logger.last("mixup/mixing");
    };
    CHECK(draw(5, 2) == draw(5, 2));
    CHECK(draw(5, 2) != draw(6, 2));
    CHECK(draw(5, 2) != draw(5, 3));
  }

  TEST_CASE("a run stopped and resumed with mixup ends bitwise identical to an uninterrupted one") {
    const ResumeComparison runs = train_stopped_and_resumed("alpha = 0.4", "mixup");
    CHECK(runs.resumed_end == 9);
    CHECK(bitwise_equal(runs.resumed, runs.whole));
    CHECK_FALSE(bitwise_equal(runs.whole, runs.without_plugin));
  }

  TEST_CASE("bad keys are configuration errors at their line") {
    CHECK(contains(config_error("alpha = -1", "mixup"), "run.toml:1"));
    CHECK(contains(config_error("alpha = -1", "mixup"), "plugins.mixup.alpha: must be a finite number >= 0, got -1"));
    CHECK(contains(config_error("alpha = 0.2\ninterpolate_loss = \"yes\"", "mixup"), "plugins.mixup.interpolate_loss"));
    CHECK(contains(config_error("alpah = 0.2", "mixup"), "unknown key 'alpah'"));
    CHECK(config_error("alpha = 0.2\ninterpolate_loss = true", "mixup").empty());
  }
}

}  // namespace mixup_test
