#include "baton_test.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ops/full.h>
#include <ATen/ops/one_hot.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "baton/trainer.h"
#include "small_trainer.h"

using baton::Event;
using baton::Time;
using baton::TimeUnit;
using baton::test::make_trainer;
using baton::test::quiet_options;
using baton::test::hand_cross_entropy;
using baton::test::labels_of;
using baton::test::rows_of;
using baton::test::values_of;

namespace {

std::size_t argmax_of(const std::vector<double>& row) {
  std::size_t best = 0;
  for (std::size_t c = 1; c < row.size(); ++c)
    if (row[c] > row[best]) best = c;
  return best;
}

// Label smoothing as Composer's LabelSmoothing does it: at before_loss the targets become (1-a)*onehot + a/C. At
// after_loss it keeps what the loss was computed from, and the loss itself.
struct SmoothTargets : baton::Algorithm {
  double alpha;
  explicit SmoothTargets(double a) : alpha(a) {}
  std::vector<std::vector<double>> outputs, targets;
  std::vector<std::int64_t> hard;
  double loss = NAN;
  bool match(Event e, const baton::State& s) override {
    return (e == Event::before_loss || e == Event::after_loss) && s.timestamp().batch == 0;
  }
  void apply(Event e, baton::State& s, baton::Logger&) override {
    if (e == Event::before_loss) {
      hard = labels_of(s.batch.targets());
      const std::int64_t classes = s.outputs.main().size(1);
      s.batch.targets() = at::one_hot(s.batch.targets(), classes).to(at::kFloat) * (1 - alpha) + alpha / classes;
      return;
    }
    outputs = rows_of(s.outputs.main());
    targets = rows_of(s.batch.targets());
    loss = s.loss.item<double>();
  }
};

// Records the gradient of the model's first parameter at after_backward of the first batch; with `weight` set, it
// first adds weight/2 * ||p||^2 of that parameter to the loss at after_loss, whose gradient is weight * p.
struct L2Term : baton::Algorithm {
  double weight;
  explicit L2Term(double w) : weight(w) {}
  at::Tensor parameter_before, grad;
  bool match(Event e, const baton::State& s) override {
    return (e == Event::after_loss || e == Event::after_backward) && s.timestamp().batch == 0;
  }
  void apply(Event e, baton::State& s, baton::Logger&) override {
    at::Tensor p = s.facts.model()->parameters().front();
    if (e == Event::after_loss) {
      parameter_before = p.detach().clone();
      if (weight != 0) s.loss = s.loss + p.pow(2).sum() * (weight / 2);
    } else {
      grad = p.grad().detach().clone();
    }
  }
};

// Replaces the batch's inputs with zeros at `when`; keeps the first batch's outputs.
struct ZeroInputs : baton::Algorithm {
  Event when;
  explicit ZeroInputs(Event e) : when(e) {}
  std::vector<std::vector<double>> outputs;
  bool match(Event e, const baton::State& s) override {
    return (e == when || e == Event::after_forward) && s.timestamp().batch == 0;
  }
  void apply(Event e, baton::State& s, baton::Logger&) override {
    if (e == when)
      s.batch.inputs() = at::zeros_like(s.batch.inputs());
    else
      outputs = rows_of(s.outputs.main());
  }
};

// Its own accuracy, from the eval batches' outputs and targets on State, counted by hand.
struct OwnAccuracy : baton::Callback {
  std::int64_t correct = 0, seen = 0;
  std::vector<double> accuracies;
  void eval_start(baton::State&, baton::Logger&) override { correct = seen = 0; }
  void eval_batch_end(baton::State& s, baton::Logger&) override {
    const auto outputs = rows_of(s.outputs.main());
    const auto targets = labels_of(s.batch.targets());
    for (std::size_t i = 0; i < outputs.size(); ++i)
      correct += static_cast<std::int64_t>(argmax_of(outputs[i])) == targets[i];
    seen += static_cast<std::int64_t>(outputs.size());
  }
  void eval_end(baton::State&, baton::Logger& logger) override {
    accuracies.push_back(static_cast<double>(correct) / static_cast<double>(seen));
    logger.log_metric("own/accuracy", accuracies.back());
  }
};

// Which of batch, outputs, loss are on State at each event: "bol" letters, '-' for an undefined one.
struct Presence : baton::Algorithm {
  std::map<std::string, std::string> seen;
  bool match(Event, const baton::State&) override { return true; }
  void apply(Event e, baton::State& s, baton::Logger&) override {
    std::string mark;
    mark += s.batch.has("inputs") && s.batch.has("targets") ? 'b' : '-';
    mark += s.outputs.defined() ? 'o' : '-';
    mark += s.loss.defined() ? 'l' : '-';
    auto [it, fresh] = seen.emplace(baton::event_name(e), mark);
    if (!fresh && it->second != mark) it->second = "varies";
  }
};

baton::TrainerOptions one_batch_options() {
  auto options = quiet_options();
  options.max_duration = Time(1, TimeUnit::batch);
  options.eval_interval = Time(0, TimeUnit::batch);
  options.save_interval = Time(0, TimeUnit::batch);
  return options;
}

}  // namespace

TEST_SUITE("step_data") {
  TEST_CASE("targets smoothed at before_loss are the targets of the loss") {
    auto trainer = make_trainer(one_batch_options(), "mlp");
    auto smooth = std::make_shared<SmoothTargets>(0.1);
    trainer->add_plugin("smooth", smooth);
    trainer->fit();
    REQUIRE(smooth->outputs.size() == 32);
    REQUIRE(smooth->targets.size() == 32);
    // The targets on State at after_loss are the smoothed ones: 0.9 + 0.01 at the label, 0.01 elsewhere.
    std::vector<std::vector<double>> expected_targets(32, std::vector<double>(10, 0.01));
    for (std::size_t i = 0; i < 32; ++i) expected_targets[i][smooth->hard[i]] += 0.9;
    for (std::size_t i = 0; i < 32; ++i)
      for (std::size_t c = 0; c < 10; ++c) CHECK(smooth->targets[i][c] == doctest::Approx(expected_targets[i][c]));
    CHECK(smooth->loss == doctest::Approx(hand_cross_entropy(smooth->outputs, expected_targets)).epsilon(1e-5));
    // ...and not the loss against the labels, which the smoothing moves well beyond float rounding.
    std::vector<std::vector<double>> onehot(32, std::vector<double>(10, 0.0));
    for (std::size_t i = 0; i < 32; ++i) onehot[i][smooth->hard[i]] = 1;
    CHECK(std::abs(smooth->loss - hand_cross_entropy(smooth->outputs, onehot)) > 1e-3);
  }

  TEST_CASE("a loss term added at after_loss is in the backpropagated gradient") {
    // The same first batch from the same initial weights, with and without weight/2 * ||p||^2 added to the loss:
    // the gradients differ by weight * p.
    const double weight = 0.5;
    auto plain = std::make_shared<L2Term>(0.0);
    auto with_term = std::make_shared<L2Term>(weight);
    auto a = make_trainer(one_batch_options(), "mlp");
    a->add_plugin("l2", plain);
    a->fit();
    auto b = make_trainer(one_batch_options(), "mlp");
    b->add_plugin("l2", with_term);
    b->fit();
    REQUIRE(plain->grad.defined());
    REQUIRE(with_term->grad.defined());
    const auto p = rows_of(with_term->parameter_before);
    const auto g0 = rows_of(plain->grad);
    const auto g1 = rows_of(with_term->grad);
    double largest_change = 0;
    for (std::size_t i = 0; i < p.size(); ++i)
      for (std::size_t j = 0; j < p[i].size(); ++j) {
        CHECK(g1[i][j] == doctest::Approx(g0[i][j] + weight * p[i][j]).epsilon(1e-5).scale(1e-3));
        largest_change = std::max(largest_change, std::abs(g1[i][j] - g0[i][j]));
      }
    CHECK(largest_change > 1e-3);  // the term is large enough to show
  }

  TEST_CASE("inputs replaced at after_dataloader or before_forward are what the model sees") {
    for (Event when : {Event::after_dataloader, Event::before_forward}) {
      const std::string event_name(baton::event_name(when));
      CAPTURE(event_name);
      auto trainer = make_trainer(one_batch_options(), "mlp");
      auto zero = std::make_shared<ZeroInputs>(when);
      trainer->add_plugin("zero", zero);
      trainer->fit();
      REQUIRE(zero->outputs.size() == 32);
      // An mlp maps equal rows to equal outputs (to rounding): every row is the output for zeros.
      for (std::size_t i = 1; i < 32; ++i)
        for (std::size_t c = 0; c < 10; ++c)
          CHECK(zero->outputs[i][c] == doctest::Approx(zero->outputs[0][c]).epsilon(1e-6));  // BLAS blocking: last bits
      // Without the plugin the synthetic images give differing rows.
      auto plain = make_trainer(one_batch_options(), "mlp");
      auto watch = std::make_shared<ZeroInputs>(Event::fit_end);  // never replaces: fit_end is after batch 0
      plain->add_plugin("watch", watch);
      plain->fit();
      REQUIRE(watch->outputs.size() == 32);
      CHECK(watch->outputs[1] != watch->outputs[0]);
    }
  }

  TEST_CASE("a plugin's own metric from the eval outputs at eval_batch_end equals the engine's accuracy") {
    auto options = quiet_options();
    options.eval_batch_size = 16;  // 50 samples: 4 eval batches, the last of 2
    auto trainer = make_trainer(options);
    auto own = std::make_shared<OwnAccuracy>();
    trainer->add_plugin("own", own);
    auto result = trainer->fit();
    REQUIRE(own->accuracies.size() == 2);
    REQUIRE(result.evals.size() == 2);
    for (std::size_t i = 0; i < 2; ++i)
      CHECK(own->accuracies[i] == doctest::Approx(result.evals[i].metrics.at("eval/accuracy")).epsilon(1e-12));
  }

  TEST_CASE("batch, outputs and loss are on State only inside their windows") {
    auto options = quiet_options();
    options.max_duration = Time(1, TimeUnit::epoch);
    auto trainer = make_trainer(options);
    auto presence = std::make_shared<Presence>();
    trainer->add_plugin("presence", presence);
    trainer->fit();
    // Written out from the window table in docs/plugins.md.
    const std::map<std::string, std::string> expected = {
        {"init", "---"},
        {"fit_start", "---"},
        {"iteration_start", "---"},
        {"epoch_start", "---"},
        {"before_dataloader", "---"},
        {"after_dataloader", "b--"},
        {"batch_start", "b--"},
        {"before_train_batch", "b--"},
        {"before_forward", "b--"},
        {"after_forward", "bo-"},
        {"before_loss", "bo-"},
        {"after_loss", "bol"},
        {"before_backward", "bol"},
        {"after_backward", "bol"},
        {"after_train_batch", "bol"},
        {"batch_end", "bol"},
        {"batch_checkpoint", "---"},
        {"epoch_end", "---"},
        {"eval_before_all", "---"},
        {"eval_start", "---"},
        {"eval_batch_start", "b--"},
        {"eval_before_forward", "b--"},
        {"eval_after_forward", "bo-"},
        {"eval_batch_end", "bo-"},
        {"eval_end", "---"},
        {"eval_after_all", "---"},
        {"epoch_checkpoint", "---"},
        {"iteration_end", "---"},
        {"iteration_checkpoint", "---"},
        {"fit_end", "---"},
    };
    CHECK(presence->seen == expected);
  }

  TEST_CASE("one-hot float targets train and evaluate as the class indices do") {
    // Soft targets that are exactly one-hot give the same loss, the same gradients and the same accuracy.
    struct OneHot : baton::Algorithm {
      std::vector<double> losses;
      bool match(Event e, const baton::State&) override {
        return e == Event::after_dataloader || e == Event::eval_batch_start || e == Event::after_loss;
      }
      void apply(Event e, baton::State& s, baton::Logger&) override {
        if (e == Event::after_loss)
          losses.push_back(s.loss.item<double>());
        else if (e == Event::after_dataloader || e == Event::eval_batch_start)
          s.batch.targets() = at::one_hot(s.batch.targets(), 10).to(at::kFloat);
      }
    };
    struct Losses : baton::Algorithm {
      std::vector<double> losses;
      bool match(Event e, const baton::State&) override { return e == Event::after_loss; }
      void apply(Event, baton::State& s, baton::Logger&) override { losses.push_back(s.loss.item<double>()); }
    };
    auto options = quiet_options();
    auto hard = make_trainer(options, "mlp");
    auto hard_losses = std::make_shared<Losses>();
    hard->add_plugin("losses", hard_losses);
    auto hard_result = hard->fit();
    auto soft = make_trainer(options, "mlp");
    auto soft_losses = std::make_shared<OneHot>();
    soft->add_plugin("onehot", soft_losses);
    auto soft_result = soft->fit();
    REQUIRE(hard_losses->losses.size() == 6);
    REQUIRE(soft_losses->losses.size() == 6);
    for (std::size_t i = 0; i < 6; ++i)
      CHECK(soft_losses->losses[i] == doctest::Approx(hard_losses->losses[i]).epsilon(1e-5));
    REQUIRE(hard_result.evals.size() == 2);
    REQUIRE(soft_result.evals.size() == 2);
    CHECK(soft_result.evals[1].metrics.at("eval/accuracy") == hard_result.evals[1].metrics.at("eval/accuracy"));
    CHECK(soft_result.evals[1].metrics.at("eval/loss") ==
          doctest::Approx(hard_result.evals[1].metrics.at("eval/loss")).epsilon(1e-5));
  }
}

namespace {

// The size of the batch on State at each before_forward, and the loss on State at each batch_end.
struct MicrobatchWatch : baton::Algorithm {
  std::vector<std::int64_t> sizes;
  std::vector<double> losses;
  bool match(Event e, const baton::State&) override { return e == Event::before_forward || e == Event::batch_end; }
  void apply(Event e, baton::State& s, baton::Logger&) override {
    if (e == Event::before_forward)
      sizes.push_back(s.batch.inputs().size(0));
    else
      losses.push_back(s.loss.item<double>());
  }
};

}  // namespace

TEST_SUITE("microbatch") {
  TEST_CASE("microbatches of 12 train an mlp as its whole batches of 32 do, to float rounding") {
    auto options = quiet_options();
    options.max_duration = Time(1, TimeUnit::epoch);
    auto whole = make_trainer(options, "mlp");
    auto whole_watch = std::make_shared<MicrobatchWatch>();
    whole->add_plugin("watch", whole_watch);
    const auto whole_result = whole->fit();

    options.microbatch_size = 12;
    auto split = make_trainer(options, "mlp");
    auto split_watch = std::make_shared<MicrobatchWatch>();
    split->add_plugin("watch", split_watch);
    const auto split_result = split->fit();

    // 3 batches of 32: the forward events fire per microbatch, 12 + 12 + 8, each with its microbatch on State.
    CHECK(whole_watch->sizes == std::vector<std::int64_t>{32, 32, 32});
    CHECK(split_watch->sizes == std::vector<std::int64_t>{12, 12, 8, 12, 12, 8, 12, 12, 8});
    // Time counts batches and samples as without microbatches.
    CHECK(split_result.end.batch == 3);
    CHECK(split_result.end.sample == whole_result.end.sample);
    // The loss on State at batch_end is the batch's: the microbatches' losses weighted by their shares.
    REQUIRE(split_watch->losses.size() == 3);
    for (std::size_t i = 0; i < 3; ++i)
      CHECK(split_watch->losses[i] == doctest::Approx(whole_watch->losses[i]).epsilon(1e-6));
    // The weights after three steps: equal to 1e-6 relative (the norm of the difference against the norm).
    auto a = whole->model().named_parameters(true);
    auto b = split->model().named_parameters(true);
    REQUIRE(a.size() == b.size());
    for (const auto& item : a) {
      CAPTURE(item.key());
      const auto x = values_of(item.value());
      const auto y = values_of(b[item.key()]);
      REQUIRE(x.size() == y.size());
      double diff = 0, norm = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        diff += (x[i] - y[i]) * (x[i] - y[i]);
        norm += x[i] * x[i];
      }
      CHECK(std::sqrt(diff) <= 1e-6 * std::sqrt(norm));
    }
    REQUIRE(split_result.evals.size() == 1);
    CHECK(split_result.evals[0].metrics.at("eval/loss") ==
          doctest::Approx(whole_result.evals[0].metrics.at("eval/loss")).epsilon(1e-6));
  }
}
