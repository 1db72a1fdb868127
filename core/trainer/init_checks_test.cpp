// What the trainer settles once init is complete: each metric's direction (State::metric_higher_is_better), the
// directions plugins rely on (State::directed_metrics), and the weight set a standalone evaluation or prediction
// asks for against the sets plugins declare (State::weight_sets).
#include "baton_test.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/components.h"
#include "baton/trainer.h"
#include "small_trainer.h"

using baton::test::make_trainer;
using baton::test::quiet_options;

namespace {

// A metric whose name says nothing of its direction: the trainer must take it from higher_is_better().
struct ConstantMetric : baton::Metric {
  double value;
  bool higher;
  ConstantMetric(double value, bool higher) : value(value), higher(higher) {}
  void update(const baton::Outputs&, const baton::Batch&) override {}
  std::vector<double> sums() const override { return {}; }
  double compute(const std::vector<double>&) const override { return value; }
  void reset() override {}
  bool higher_is_better() const override { return higher; }
};

// At init: adds the "eval_raw" pass, declares the direction of a metric of its own and a contrary one for a metric
// the run computes, and names the metrics it ranks by their direction.
struct Declaring : baton::Callback {
  std::vector<baton::WatchedMetric> directed;
  void init(baton::State& s, baton::Logger&) override {
    s.eval_labels.push_back("eval_raw");
    s.metric_names.push_back("plug/score");
    s.metric_higher_is_better["plug/score"] = true;
    s.metric_higher_is_better["eval/spread"] = true;  // the metric's own answer (false) stands
    for (const auto& d : directed) {
      s.watched_metrics.push_back(d);
      s.directed_metrics.push_back(d);
    }
  }
};

// Keeps the weight sets "average" and "raw", and notes the request it saw at init and the evaluations it served.
struct KeepsSets : baton::Callback {
  std::string request;
  int evaluations = 0;
  void init(baton::State& s, baton::Logger&) override {
    s.weight_sets.insert(s.weight_sets.end(), {"average", "raw"});
    request = s.eval_weights;
  }
  void eval_start(baton::State&, baton::Logger&) override { ++evaluations; }
};

// A plugin built before State::weight_sets: it takes the request by clearing State::eval_weights.
struct TakesRequest : baton::Callback {
  void init(baton::State& s, baton::Logger&) override { s.eval_weights.clear(); }
};

baton::TrainerOptions with_metrics() {
  auto options = quiet_options();
  options.metrics = {{"spread", std::make_shared<ConstantMetric>(0.25, false)},
                     {"hits", std::make_shared<ConstantMetric>(0.75, true)}};
  // An extra set with the defaults for class targets: accuracy, of which more is better.
  options.eval_sets = {{"holdout", std::make_shared<baton::TensorDataset>(baton::make_synthetic_dataset(20, 9)), {},
                        std::nullopt}};
  return options;
}

// A trainer whose standalone evaluation or prediction asks for the weight set `weights`.
std::unique_ptr<baton::Trainer> asking_for(const std::string& weights) {
  auto options = quiet_options();
  options.eval_weights = weights;
  return make_trainer(options, "mlp");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string config_error_of(baton::Trainer& trainer, const std::function<void(baton::Trainer&)>& call) {
  try {
    call(trainer);
  } catch (const baton::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("trainer") {
  TEST_CASE("after init the run knows each metric's direction: the metric's own, a loss lower, a plugin's own") {
    auto trainer = make_trainer(with_metrics(), "mlp");
    trainer->add_plugin("declaring", std::make_shared<Declaring>());
    trainer->check();
    const auto& state = trainer->state();
    // Every pass ("eval" and the plugin's "eval_raw") on both sets; a plugin's own metric as it declared it.
    const std::map<std::string, bool> expected = {
        {"train/loss", false},
        {"eval/loss", false},           {"eval/spread", false},           {"eval/hits", true},
        {"eval_raw/loss", false},       {"eval_raw/spread", false},       {"eval_raw/hits", true},
        {"eval/holdout/loss", false},   {"eval/holdout/accuracy", true},
        {"eval_raw/holdout/loss", false}, {"eval_raw/holdout/accuracy", true},
        {"plug/score", true}};
    CHECK(state.metric_higher_is_better == expected);
    CHECK(state.higher_is_better("eval/spread") == false);
    CHECK(state.higher_is_better("eval/hits") == true);
    CHECK_FALSE(state.higher_is_better("lr").has_value());  // logged, but no one says which way is better
  }

  TEST_CASE("a metric a plugin ranks without a mode must have a direction: refused at its key before the run") {
    const baton::SourceLocation where{"run.toml", 3, 11};
    auto directed = [&](const std::string& metric) {
      auto plugin = std::make_shared<Declaring>();
      plugin->directed = {baton::WatchedMetric{metric, "plugins.p.monitor", where}};
      return plugin;
    };
    auto unknown = make_trainer(with_metrics(), "mlp");
    unknown->add_plugin("p", directed("lr"));
    CHECK(config_error_of(*unknown, [](baton::Trainer& t) { t.check(); }) ==
          "run.toml:3:11: plugins.p.monitor: whether a higher or lower 'lr' is better is not known to the run (it "
          "knows the direction of evaluation metrics and losses, and of the metrics plugins declare in "
          "State::metric_higher_is_better); set mode = \"max\" or \"min\" beside it");
    CHECK(unknown->state().progress.now.batch == 0);

    for (const char* known : {"eval/spread", "eval_raw/hits", "train/loss", "plug/score"}) {
      CAPTURE(known);
      auto trainer = make_trainer(with_metrics(), "mlp");
      trainer->add_plugin("p", directed(known));
      CHECK_NOTHROW(trainer->check());
    }

    // A name the run never logs is reported as such, with the names it does log.
    auto typo = make_trainer(with_metrics(), "mlp");
    typo->add_plugin("p", directed("eval/sprad"));
    CHECK(contains(config_error_of(*typo, [](baton::Trainer& t) { t.check(); }),
                   "run.toml:3:11: plugins.p.monitor: this run logs no metric 'eval/sprad' (did you mean "
                   "'eval/spread'?)"));
  }

  TEST_CASE("--weights: a set a plugin declares is served; another is refused, listing the declared sets") {
    {
      auto trainer = asking_for("average");
      auto keeper = std::make_shared<KeepsSets>();
      trainer->add_plugin("keeper", keeper);
      CHECK(trainer->evaluate_standalone().size() == 1);
      CHECK(keeper->request == "average");  // the request stays on State for the plugin whose set it names
      CHECK(keeper->evaluations == 1);
    }
    {
      auto trainer = asking_for("best");
      auto keeper = std::make_shared<KeepsSets>();
      trainer->add_plugin("keeper", keeper);
      CHECK(config_error_of(*trainer, [](baton::Trainer& t) { t.evaluate_standalone(); }) ==
            "--weights best: evaluation with the \"best\" weights asked for, but the plugins of this run keep no "
            "such set; they keep \"average\", \"raw\"");
      CHECK(keeper->evaluations == 0);  // refused before anything ran
    }
    {
      // Two plugins may keep a set of the same name: it is listed once.
      auto trainer = asking_for("averge");
      trainer->add_plugin("keeper", std::make_shared<KeepsSets>());
      trainer->add_plugin("keeper#2", std::make_shared<KeepsSets>());
      CHECK(config_error_of(*trainer, [](baton::Trainer& t) { t.predict(); }) ==
            "--weights averge: prediction with the \"averge\" weights asked for, but the plugins of this run keep "
            "no such set (did you mean 'average'?); they keep \"average\", \"raw\"");
    }
    {
      auto trainer = asking_for("ema");
      CHECK(config_error_of(*trainer, [](baton::Trainer& t) { t.evaluate_standalone(); }) ==
            "--weights ema: evaluation with the \"ema\" weights asked for, but no plugin of this run keeps more "
            "than one set of weights: run it without --weights, or with a config that loads such a plugin");
    }
    {
      // The handshake of plugins built before State::weight_sets: a request taken at init is served.
      auto trainer = asking_for("ema");
      trainer->add_plugin("older", std::make_shared<TakesRequest>());
      CHECK(trainer->evaluate_standalone().size() == 1);
    }
  }
}
