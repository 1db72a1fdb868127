// early_stopper, loaded through the loader and driven event by event with metric sequences whose stop points are
// worked out by hand in each case.
#include "baton_test.h"

#include <map>
#include <string>
#include <vector>

#include "monitor_test_support.h"
#include "plugin_files.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace early_stopper_test {

using namespace monitor_test;

namespace {

// The directions a trainer gives its metrics after init (State::metric_higher_is_better): losses lower,
// accuracy higher, mae lower (its metric says so; its name does not).
const std::map<std::string, bool> kDirections = {{"train/loss", false},   {"eval/loss", false},
                                                 {"eval/accuracy", true},  {"eval/mae", false},
                                                 {"eval_raw/loss", false}, {"eval_raw/accuracy", true}};

// A run of 10 epochs of 4 batches, evaluated once per epoch by the "eval" pass (and "eval_raw" when asked).
struct Driver {
  baton::LoadedPlugin plugin;
  baton::State state;
  RecordingLogger logger{&state};

  explicit Driver(const std::string& toml, std::vector<std::string> labels = {"eval"})
      : plugin(load_plugin(baton::test::plugin_file("early_stopper"), "early_stopper", toml)) {
    std::vector<std::string> names;
    for (const auto& [name, higher] : kDirections) names.push_back(name);
    state.facts.set_metrics(names, kDirections);
    state.facts.set_eval_passes(std::move(labels));
    state.progress.max_duration = baton::Time(10, baton::TimeUnit::epoch);
    state.progress.batches_per_epoch = 4;
    plugin.callback->fit_start(state, logger);
  }
  void batch() {
    state.progress.now.batch += 1;
    state.progress.now.batch_in_epoch += 1;
    plugin.callback->batch_end(state, logger);
  }
  // The epoch's last batch, its end and its evaluation, which logs `metrics` (name, value).
  void epoch(const std::vector<std::pair<std::string, double>>& metrics) {
    for (int i = 0; i < 4; ++i) batch();
    state.progress.now.epoch += 1;
    state.progress.now.batch_in_epoch = 0;
    plugin.callback->epoch_end(state, logger);
    evaluate(metrics);
  }
  void evaluate(const std::vector<std::pair<std::string, double>>& metrics) {
    plugin.callback->eval_before_all(state, logger);
    for (const auto& [name, value] : metrics) logger.log_metric(name, value);
    plugin.callback->eval_after_all(state, logger);
  }
  // Epochs with eval/accuracy taking `values` until the plugin asks to stop; returns the epochs run.
  int accuracies(const std::vector<double>& values) {
    int epochs = 0;
    for (double v : values) {
      epoch({{"eval/loss", 1.0}, {"eval/accuracy", v}});
      ++epochs;
      if (state.stop_requested()) break;
    }
    return epochs;
  }
};

}  // namespace

TEST_SUITE("early_stopper") {
  TEST_CASE("patience 1ep (the default): stops at the second evaluation without an improvement") {
    // Best 0.6 at ep 2; ep 3 waits 1 epoch (not more than 1), ep 4 waits 2 > 1: stop at ep 4.
    Driver d("monitor = \"eval/accuracy\"");
    CHECK(d.accuracies({0.5, 0.6, 0.55, 0.6, 0.9, 0.9}) == 4);
    REQUIRE(d.state.stop_requested());
    CHECK(d.state.stop_reason() ==
          "early_stopper: eval/accuracy has not improved on its best (0.6 at ep 2 ba 8, mode max) by more than 0 "
          "for more than 1ep: 0.6 at ep 4 ba 16");
  }

  TEST_CASE("min_delta: a gain of no more than min_delta is no improvement") {
    // Values in binary fractions, so the gains are exact. min_delta 0.25, patience 2 (an integer: epochs).
    // Best 0.5 at ep 1; 0.75 gains exactly 0.25 (not more): no new best; ep 4 waits 3 > 2: stop at ep 4.
    Driver d("monitor = \"eval/accuracy\"\nmin_delta = 0.25\npatience = 2");
    CHECK(d.accuracies({0.5, 0.75, 0.625, 0.5, 1.0}) == 4);
    CHECK(d.state.stop_requested());

    // 0.875 gains 0.375 > 0.25: a new best at ep 3; the gains after it (0.125, 0.1875, 0.25) are not enough, and
    // ep 6 is the first to wait 3 > 2.
    Driver later("monitor = \"eval/accuracy\"\nmin_delta = 0.25\npatience = 2");
    CHECK(later.accuracies({0.5, 0.75, 0.875, 1.0, 1.0625, 1.125, 2.0}) == 6);
    CHECK(contains(later.state.stop_reason(), "(0.875 at ep 3 ba 12, mode max) by more than 0.25 for more than 2ep"));
  }

  TEST_CASE("a loss is minimised by default; mode overrides it") {
    // eval/loss: lower is better. Best 0.9 at ep 2, ep 3 and 4 higher: stop at ep 4 (waited 2 > 1).
    Driver loss("monitor = \"eval/loss\"");
    int epochs = 0;
    for (double v : {1.0, 0.9, 0.95, 0.91, 0.1}) {
      loss.epoch({{"eval/loss", v}, {"eval/accuracy", 0.5}});
      ++epochs;
      if (loss.state.stop_requested()) break;
    }
    CHECK(epochs == 4);
    CHECK(contains(loss.state.stop_reason(), "(0.9 at ep 2 ba 8, mode min)"));

    // The same rising accuracies with mode = "min": every one is worse than the first; stop at ep 3.
    Driver inverted("monitor = \"eval/accuracy\"\nmode = \"min\"");
    CHECK(inverted.accuracies({0.5, 0.6, 0.7, 0.8}) == 3);
  }

  TEST_CASE("without mode the metric's own direction decides: a lower-is-better mae is minimised; mode overrides") {
    // eval/mae 1.0, 0.8, 0.9, 0.85: best 0.8 at ep 2, ep 3 waits 1, ep 4 waits 2 > 1: stop at ep 4. Maximised (as a
    // guess from the name would have it) the best would be 1.0 at ep 1 and the stop at ep 3.
    auto run = [](Driver& d) {
      int epochs = 0;
      for (double v : {1.0, 0.8, 0.9, 0.85, 0.1}) {
        d.epoch({{"eval/loss", 1.0}, {"eval/mae", v}});
        ++epochs;
        if (d.state.stop_requested()) break;
      }
      return epochs;
    };
    Driver mae("monitor = \"eval/mae\"");
    CHECK(run(mae) == 4);
    CHECK(contains(mae.state.stop_reason(), "eval/mae has not improved on its best (0.8 at ep 2 ba 8, mode min)"));

    Driver inverted("monitor = \"eval/mae\"\nmode = \"max\"");
    CHECK(run(inverted) == 3);
    CHECK(contains(inverted.state.stop_reason(), "(1 at ep 1 ba 4, mode max)"));

    // The direction is the run's, not the name's: a metric named like a loss that the run says is better higher.
    Driver named("monitor = \"eval/loss_ratio\"");
    auto directions = kDirections;
    directions["eval/loss_ratio"] = true;
    named.state.facts.set_metrics({"eval/loss_ratio"}, directions);
    named.plugin.callback->fit_start(named.state, named.logger);
    int epochs = 0;
    for (double v : {0.5, 0.75, 0.625, 0.6}) {  // best 0.75 at ep 2; ep 4 waits 2 > 1
      named.epoch({{"eval/loss_ratio", v}});
      ++epochs;
      if (named.state.stop_requested()) break;
    }
    CHECK(epochs == 4);
    CHECK(contains(named.state.stop_reason(), "(0.75 at ep 2 ba 8, mode max)"));
  }

  TEST_CASE("a monitor is declared with its key and mode; one the run gives no direction fails when checked") {
    baton::State state;
    RecordingLogger logger{&state};
    auto plugin = load_plugin(baton::test::plugin_file("early_stopper"), "early_stopper", "patience = 2\nmonitor = \"eval/mae\"");
    baton::Declarations declared;
    plugin.callback->declare(declared);
    REQUIRE(declared.watched().size() == 1);  // checked against the names logged and, without mode, a direction
    CHECK(declared.watched()[0].metric == "eval/mae");
    CHECK(declared.watched()[0].key == "plugins.early_stopper.monitor");
    CHECK(declared.watched()[0].where.line == 2);
    CHECK_FALSE(declared.watched()[0].maximize.has_value());

    auto told = load_plugin(baton::test::plugin_file("early_stopper"), "early_stopper", "monitor = \"eval/mae\"\nmode = \"min\"");
    baton::Declarations with_mode;
    told.callback->declare(with_mode);
    REQUIRE(with_mode.watched().size() == 1);
    CHECK(with_mode.watched()[0].maximize == false);

    // Without a trainer to refuse it first, a metric of no known direction fails at its first value.
    Driver unknown("monitor = \"custom/score\"");
    unknown.logger.log_metric("custom/score", 0.5);
    CHECK_THROWS_WITH_AS(unknown.plugin.callback->epoch_end(unknown.state, unknown.logger),
                         doctest::Contains("plugins.early_stopper.monitor: whether a higher or lower 'custom/score' "
                                           "is better is not known to the run"),
                         baton::ConfigError);
  }

  TEST_CASE("patience in batches, evaluated every 3 batches: stops at the evaluation that waited more than it") {
    // Evaluations at ba 3, 6, 9, 12 (no epoch boundary matters). Best 0.7 at ba 3; ba 6 waits 3, ba 9 waits 6
    // (not more than 6ba); ba 12 waits 9 > 6: stop there, though batch_end saw more than 6 batches pass at ba 10.
    Driver d("monitor = \"eval/accuracy\"\npatience = \"6ba\"");
    const std::vector<double> values = {0.7, 0.6, 0.65, 0.69, 0.99};
    std::size_t next = 0;
    while (!d.state.stop_requested() && next < values.size()) {
      d.batch();
      if (d.state.progress.now.batch % 3 == 0) d.evaluate({{"eval/accuracy", values[next++]}});
      if (d.state.progress.now.batch == 10) CHECK_FALSE(d.state.stop_requested());
    }
    CHECK(d.state.progress.now.batch == 12);
    CHECK(contains(d.state.stop_reason(), "for more than 6ba: 0.69 at ep 0 ba 12"));
  }

  TEST_CASE("a training metric is checked after every batch when patience counts batches") {
    // train/loss logged each batch: 1.0, 0.8, 0.85, 0.9, 0.95, ... Best 0.8 at ba 2; ba 5 waits 3 > 2: stop.
    Driver d("monitor = \"train/loss\"\npatience = \"2ba\"");
    const std::vector<double> losses = {1.0, 0.8, 0.85, 0.9, 0.95, 1.0};
    for (double v : losses) {
      d.state.progress.now.batch += 1;
      d.logger.log_metric("train/loss", v);
      d.plugin.callback->batch_end(d.state, d.logger);
      if (d.state.stop_requested()) break;
    }
    CHECK(d.state.progress.now.batch == 5);
    CHECK(contains(d.state.stop_reason(), "train/loss has not improved on its best (0.8 at ep 0 ba 2, mode min)"));
  }

  TEST_CASE("the metric of another evaluation pass: eval_raw/accuracy") {
    Driver d("monitor = \"eval_raw/accuracy\"", {"eval", "eval_raw"});
    int epochs = 0;
    // eval/accuracy keeps rising, eval_raw/accuracy peaks at ep 1: stop at ep 3.
    for (double v : {0.9, 0.8, 0.8, 0.8}) {
      d.epoch({{"eval/accuracy", 0.1 * ++epochs}, {"eval_raw/accuracy", v}});
      if (d.state.stop_requested()) break;
    }
    CHECK(epochs == 3);
  }

  TEST_CASE("a resumed run stops where the uninterrupted one does: the best value is in the checkpoint") {
    // Uninterrupted: best 0.8 at ep 2, stop at ep 4 (waited 2 > 1).
    Driver first("monitor = \"eval/accuracy\"");
    first.accuracies({0.7, 0.8, 0.75});  // ep 1..3, no stop yet
    REQUIRE_FALSE(first.state.stop_requested());
    baton::StateDict saved;
    first.plugin.plugin->state_dict(saved);
    CHECK(saved.get_double("best") == 0.8);
    CHECK(saved.get_int("best_batch") == 8);

    // A new process resumes at ep 3 with the saved state: the next evaluation, ep 4, stops it.
    Driver resumed("monitor = \"eval/accuracy\"");
    resumed.plugin.plugin->load_state_dict(saved);
    resumed.state.progress.now = first.state.progress.now;
    resumed.plugin.callback->fit_start(resumed.state, resumed.logger);
    CHECK(resumed.accuracies({0.79}) == 1);
    CHECK(resumed.state.stop_requested());
    CHECK(resumed.state.progress.now.epoch == 4);
    CHECK(contains(resumed.state.stop_reason(), "(0.8 at ep 2 ba 8, mode max)"));

    // Without the state it would have taken 0.79 as its first best and gone on.
    Driver fresh("monitor = \"eval/accuracy\"");
    fresh.state.progress.now = first.state.progress.now;
    CHECK(fresh.accuracies({0.79}) == 1);
    CHECK_FALSE(fresh.state.stop_requested());

    // Resumed from the checkpoint written when it stopped, the run stops again at once.
    baton::StateDict at_stop;
    resumed.plugin.plugin->state_dict(at_stop);
    CHECK(at_stop.get_bool("stopped"));
    Driver again("monitor = \"eval/accuracy\"");
    again.plugin.plugin->load_state_dict(at_stop);
    again.state.progress.now = resumed.state.progress.now;
    again.plugin.callback->fit_start(again.state, again.logger);
    CHECK(again.state.stop_requested());
    CHECK(contains(again.state.stop_reason(), "(before the resume)"));
    again.plugin.callback->fit_end(again.state, again.logger);
    CHECK(again.logger.warnings.empty());  // it checked nothing, rightly

    // A checkpoint of another monitor is not used, with a warning.
    Driver other("monitor = \"eval/loss\"");
    other.plugin.plugin->load_state_dict(saved);
    other.plugin.callback->fit_start(other.state, other.logger);
    REQUIRE(other.logger.warnings.size() == 1);
    CHECK(contains(other.logger.warnings[0], "tracked 'eval/accuracy' (mode max), this run monitors 'eval/loss'"));
  }

  TEST_CASE("no stop at the run's last batch, nothing outside fit, and a missing eval metric is an error") {
    Driver d("monitor = \"eval/accuracy\"\npatience = 0");
    d.state.progress.max_duration = baton::Time(2, baton::TimeUnit::epoch);
    d.accuracies({0.5, 0.4});  // ep 2 waits 1 > 0, but the run is over
    CHECK_FALSE(d.state.stop_requested());

    // A name with an evaluation pass's prefix that the pass does not log: an error at its first evaluation.
    Driver typo("monitor = \"eval/acc\"");
    CHECK_THROWS_WITH_AS(typo.epoch({{"eval/loss", 1.0}, {"eval/accuracy", 0.5}}),
                         doctest::Contains("the 'eval' evaluation logged no metric 'eval/acc'"), baton::Error);

    // Not in `baton eval`: the same evaluation events outside fit change nothing.
    Driver standalone("monitor = \"eval/accuracy\"\npatience = 0");
    standalone.plugin.callback->fit_end(standalone.state, standalone.logger);
    standalone.accuracies({0.5, 0.4, 0.3});
    CHECK_FALSE(standalone.state.stop_requested());

    Driver unknown("monitor = \"ema/smoothing\"");
    unknown.plugin.callback->fit_end(unknown.state, unknown.logger);
    REQUIRE(unknown.logger.warnings.size() == 1);
    CHECK(contains(unknown.logger.warnings[0], "no metric 'ema/smoothing' was logged during the run"));
  }

  TEST_CASE("bad keys are ConfigErrors naming file, line and key") {
    const std::string file = baton::test::plugin_file("early_stopper");
    CHECK(contains(config_error(file, "early_stopper", "patience = 2"),
                   "plugins.early_stopper.monitor: missing: expected a metric name"));
    CHECK(contains(config_error(file, "early_stopper", "monitor = \"eval/accuracy\"\nmode = \"up\""),
                   "run.toml:2:8: plugins.early_stopper.mode: expected one of \"min\", \"max\", got string \"up\""));
    CHECK(contains(config_error(file, "early_stopper", "monitor = \"eval/accuracy\"\npatience = \"3sp\""),
                   "run.toml:2:12: plugins.early_stopper.patience: expected a time in ba or ep"));
    CHECK(contains(config_error(file, "early_stopper", "monitor = \"eval/accuracy\"\npatience = -1"),
                   "run.toml:2:12: plugins.early_stopper.patience: expected a number of epochs >= 0, got -1"));
    CHECK(contains(config_error(file, "early_stopper", "monitor = \"eval/accuracy\"\nmin_delta = -0.1"),
                   "run.toml:2:13: plugins.early_stopper.min_delta: expected a number >= 0"));
    CHECK(contains(config_error(file, "early_stopper", "monitor = 3"),
                   "run.toml:1:11: plugins.early_stopper.monitor: expected a string, got integer 3"));
    CHECK(contains(config_error(file, "early_stopper", "monitor = \"eval/accuracy\"\npatiense = 2"), "patiense"));
    CHECK(config_error(file, "early_stopper", "monitor = \"eval/accuracy\"\npatience = \"5ba\"\nmin_delta = 0.01\n"
                                              "mode = \"max\"") == "");
  }
}

}  // namespace early_stopper_test
