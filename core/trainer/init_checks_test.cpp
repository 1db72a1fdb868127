// What the trainer settles from the plugins' declarations (Plugin::declare) once init is complete: each metric's
// direction (RunFacts::higher_is_better), the metrics plugins watch and rank by their direction, and the weight set
// a standalone evaluation or prediction asks for against the sets plugins declare (RunFacts::weight_sets).
#include "baton_test.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/components.h"
#include "baton/trainer.h"
#include "error_text.h"
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

// Declares the "eval_raw" pass, the direction of a metric of its own and a contrary one for a metric the run
// computes, a family of names, and the metrics it ranks by their direction.
struct Declaring : baton::Callback {
  std::vector<baton::WatchedMetric> directed;
  void declare(baton::Declarations& run) const override {
    run.eval_pass("eval_raw");
    run.metric("plug/score", true);
    run.metric("eval/spread", true);  // the metric's own answer (false) stands
    run.metric_family("plug/layer/");
    for (const auto& d : directed) run.watch(d);
  }
};

// Keeps the weight sets "average" and "raw" and the pass "eval_average", and notes the request it saw at init, the
// passes it was evaluated in and the evaluations it served.
struct KeepsSets : baton::Callback {
  std::string request;
  std::vector<std::string> passes;
  void declare(baton::Declarations& run) const override {
    run.weight_set("average");
    run.weight_set("raw");
    run.eval_pass("eval_average");
  }
  void init(baton::State& s, baton::Logger&) override { request = s.facts.requested_weights(); }
  void eval_start(baton::State& s, baton::Logger&) override { passes.push_back(s.eval_label); }
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

using baton::test::contains;

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
    const baton::RunFacts& facts = trainer->state().facts;
    CHECK(facts.eval_passes() == std::vector<std::string>{"eval", "eval_raw"});
    // Every pass ("eval" and the plugin's "eval_raw") on both sets; a plugin's own metric as it declared it.
    const std::map<std::string, bool> expected = {
        {"train/loss", false},
        {"eval/loss", false},           {"eval/spread", false},           {"eval/hits", true},
        {"eval_raw/loss", false},       {"eval_raw/spread", false},       {"eval_raw/hits", true},
        {"eval/holdout/loss", false},   {"eval/holdout/accuracy", true},
        {"eval_raw/holdout/loss", false}, {"eval_raw/holdout/accuracy", true},
        {"plug/score", true}};
    for (const auto& [name, higher] : expected) {
      CAPTURE(name);
      CHECK(facts.higher_is_better(name) == higher);
      CHECK(facts.logs(name));
    }
    // The run's own names first, then the plugin's: 2 + 2 passes x (3 + 2) metrics + 1.
    CHECK(facts.metric_names().size() == 2 + 2 * 5 + 1);
    CHECK(facts.metric_names().front() == "train/loss");
    CHECK(facts.metric_names().back() == "plug/score");
    CHECK_FALSE(facts.higher_is_better("lr").has_value());  // logged, but no one says which way is better
    CHECK(facts.logs("lr"));
    // A family covers the names under its prefix, not the prefix itself nor a neighbour.
    CHECK(facts.logs("plug/layer/fc1.weight"));
    CHECK_FALSE(facts.logs("plug/layer/"));
    CHECK_FALSE(facts.logs("plug/layers"));
    CHECK_FALSE(facts.logs("eval/sprad"));
  }

  TEST_CASE("a metric a plugin ranks without a mode must have a direction: refused at its key before the run") {
    const baton::SourceLocation where{"run.toml", 3, 11};
    auto directed = [&](const std::string& metric) {
      auto plugin = std::make_shared<Declaring>();
      plugin->directed = {baton::WatchedMetric{metric, "plugins.p.monitor", where, std::nullopt}};
      return plugin;
    };
    auto unknown = make_trainer(with_metrics(), "mlp");
    unknown->add_plugin("p", directed("lr"));
    CHECK(config_error_of(*unknown, [](baton::Trainer& t) { t.check(); }) ==
          "run.toml:3:11: plugins.p.monitor: whether a higher or lower 'lr' is better is not known to the run (it "
          "knows the direction of evaluation metrics and losses, and of the metrics plugins declare with one); "
          "set mode = \"max\" or \"min\" beside it");
    CHECK(unknown->state().progress.now.batch == 0);

    for (const char* known : {"eval/spread", "eval_raw/hits", "train/loss", "plug/score"}) {
      CAPTURE(known);
      auto trainer = make_trainer(with_metrics(), "mlp");
      trainer->add_plugin("p", directed(known));
      CHECK_NOTHROW(trainer->check());
    }

    // With `mode` given, a metric without a direction is fine: the mode ranks.
    auto with_mode = make_trainer(with_metrics(), "mlp");
    auto plugin = std::make_shared<Declaring>();
    plugin->directed = {baton::WatchedMetric{"lr", "plugins.p.monitor", where, false}};
    with_mode->add_plugin("p", plugin);
    CHECK_NOTHROW(with_mode->check());
    CHECK_FALSE(with_mode->state().facts.maximizes(plugin->directed.front()));

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
      // A request is one pass, the main one: the plugin's own pass would evaluate the same weights again.
      CHECK(trainer->evaluate_standalone().size() == 1);
      CHECK(keeper->request == "average");  // the request is a fact of the run, for the plugin whose set it names
      CHECK(keeper->passes == std::vector<std::string>{"eval"});
    }
    {
      // Without a request, every declared pass runs.
      auto trainer = asking_for("");
      auto keeper = std::make_shared<KeepsSets>();
      trainer->add_plugin("keeper", keeper);
      CHECK(trainer->evaluate_standalone().size() == 2);
      CHECK(keeper->passes == std::vector<std::string>{"eval", "eval_average"});
    }
    {
      auto trainer = asking_for("best");
      auto keeper = std::make_shared<KeepsSets>();
      trainer->add_plugin("keeper", keeper);
      CHECK(config_error_of(*trainer, [](baton::Trainer& t) { t.evaluate_standalone(); }) ==
            "--weights best: evaluation with the \"best\" weights asked for, but the plugins of this run keep no "
            "such set; they keep \"average\", \"raw\"");
      CHECK(keeper->passes.empty());  // refused before anything ran
      CHECK(trainer->state().facts.metric_names().empty());  // init never ran
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
    
  }
}

TEST_SUITE("init checks") {
  TEST_CASE("check() runs the forward and the loss on the first training batch: unconverted int8 inputs fail there") {
    // What `baton check` caught too late before (issue 41 §9): a file's int8 pixels left as they are reach the
    // model's first Linear, which LibTorch refuses at batch 1 of the run.
    auto data = std::make_shared<baton::TensorDataset>(baton::make_synthetic_dataset(96, 7));
    auto eval = std::make_shared<baton::TensorDataset>(baton::make_synthetic_dataset(50, 8));
    auto raw = std::make_shared<baton::TensorDataset>(*data);
    raw->inputs = data->inputs.mul(10).to(at::kChar);
    auto bad = baton::test::make_trainer(quiet_options(), raw, eval, "mlp");
    const std::string error = baton::test::error_text([&] { bad->check(); });
    CAPTURE(error);
    CHECK(error.find("the first training batch (ep 0 ba 0): the model's forward failed on inputs [32, 1, 28, 28] Char") !=
          std::string::npos);

    // The same data converted checks clean, and the look leaves the model as it was: weights, batch-norm
    // statistics and training mode.
    auto good = baton::test::make_trainer(quiet_options(), data, eval, "convnet");
    std::vector<at::Tensor> before;
    for (const auto& t : good->model().buffers()) before.push_back(t.clone());
    for (const auto& t : good->model().parameters()) before.push_back(t.detach().clone());
    good->model().train();
    CHECK_NOTHROW(good->check());
    CHECK(good->model().is_training());
    std::size_t i = 0;
    for (const auto& t : good->model().buffers()) CHECK(t.equal(before[i++]));
    for (const auto& t : good->model().parameters()) CHECK(t.detach().equal(before[i++]));
    CHECK(i > 4);  // the convnet has batch-norm buffers as well as weights
  }
}
