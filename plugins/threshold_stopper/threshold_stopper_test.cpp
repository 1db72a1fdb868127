// threshold_stopper, loaded through the loader and driven event by event with metric sequences whose stop points
// are worked out by hand.
#include "baton_test.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "baton/components.h"
#include "monitor_test_support.h"
#include "small_trainer.h"
#include "plugin_files.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace threshold_stopper_test {

using namespace monitor_test;

namespace {

// A run of 10 epochs of 4 batches, evaluated once per epoch.
struct Driver {
  baton::LoadedPlugin plugin;
  baton::State state;
  RecordingLogger logger{&state};

  explicit Driver(const std::string& toml) : plugin(load_plugin(baton::test::plugin_file("threshold_stopper"), "threshold_stopper", toml)) {
    // The directions a trainer gives its metrics after init (RunFacts::higher_is_better): losses lower,
    // accuracy higher, rmse lower (its metric says so; its name does not).
    state.facts.set_metrics({"train/loss", "eval/loss", "eval/accuracy", "eval/rmse"},
                            {{"train/loss", false}, {"eval/loss", false}, {"eval/accuracy", true}, {"eval/rmse", false}});
    state.progress.max_duration = baton::Time(10, baton::TimeUnit::epoch);
    state.progress.batches_per_epoch = 4;
    plugin.callback->fit_start(state, logger);
  }
  // One batch that logs train/loss `loss`.
  void batch(double loss) {
    state.progress.now.batch += 1;
    state.progress.now.batch_in_epoch += 1;
    logger.log_metric("train/loss", loss);
    plugin.callback->batch_end(state, logger);
  }
  void end_epoch() {
    state.progress.now.epoch += 1;
    state.progress.now.batch_in_epoch = 0;
    plugin.callback->epoch_end(state, logger);
  }
  void evaluate(double loss, double accuracy) {
    plugin.callback->eval_before_all(state, logger);
    logger.log_metric("eval/loss", loss);
    logger.log_metric("eval/accuracy", accuracy);
    plugin.callback->eval_after_all(state, logger);
  }
  // An epoch of 4 batches of train/loss 1, then an evaluation that logs `name` = `value`.
  void epoch_logging(const std::string& name, double value) {
    for (int i = 0; i < 4; ++i) batch(1.0);
    end_epoch();
    plugin.callback->eval_before_all(state, logger);
    logger.log_metric(name, value);
    plugin.callback->eval_after_all(state, logger);
  }
  // Epochs (4 batches of train/loss 1, then an evaluation) until a stop; returns the epochs run.
  int epochs(const std::vector<std::pair<double, double>>& evals) {
    int n = 0;
    for (const auto& [loss, accuracy] : evals) {
      for (int i = 0; i < 4; ++i) batch(1.0);
      end_epoch();
      evaluate(loss, accuracy);
      ++n;
      if (state.stop_requested()) break;
    }
    return n;
  }
};

}  // namespace

TEST_SUITE("threshold_stopper") {
  TEST_CASE("accuracy (maximised by default) stops at the first evaluation strictly above the threshold") {
    // 0.5, 0.75 (equal: not above), 0.8 (above): stop at ep 3.
    Driver d("monitor = \"eval/accuracy\"\nthreshold = 0.75");
    CHECK(d.epochs({{1, 0.5}, {1, 0.75}, {1, 0.8}, {1, 0.9}}) == 3);
    CHECK(d.state.stop_reason() == "threshold_stopper: eval/accuracy 0.8 > threshold 0.75 at ep 3 ba 12");
  }

  TEST_CASE("a loss is minimised by default; mode overrides it") {
    Driver loss("monitor = \"eval/loss\"\nthreshold = 0.5");
    CHECK(loss.epochs({{0.9, 0}, {0.5, 0}, {0.25, 0}, {0.1, 0}}) == 3);  // 0.5 is not below 0.5
    CHECK(loss.state.stop_reason() == "threshold_stopper: eval/loss 0.25 < threshold 0.5 at ep 3 ba 12");

    // mode = "max" on a loss: stop once it rises above 2 (ep 2).
    Driver rising("monitor = \"eval/loss\"\nthreshold = 2\nmode = \"max\"");
    CHECK(rising.epochs({{1, 0}, {3, 0}, {4, 0}}) == 2);
  }

  TEST_CASE("without mode the metric's own direction decides: rmse (lower is better) stops below the threshold") {
    // 0.9, 0.5 (not below), 0.25: stop at ep 3. Maximised (as a guess from the name would have it) it would
    // have stopped at none of them.
    Driver d("monitor = \"eval/rmse\"\nthreshold = 0.5");
    int epochs = 0;
    for (double v : {0.9, 0.5, 0.25, 0.1}) {
      d.epoch_logging("eval/rmse", v);
      ++epochs;
      if (d.state.stop_requested()) break;
    }
    CHECK(epochs == 3);
    CHECK(d.state.stop_reason() == "threshold_stopper: eval/rmse 0.25 < threshold 0.5 at ep 3 ba 12");

    // mode = "max" overrides: the first value above 0.5 (0.9 at ep 1) stops.
    Driver up("monitor = \"eval/rmse\"\nthreshold = 0.5\nmode = \"max\"");
    up.epoch_logging("eval/rmse", 0.9);
    CHECK(up.state.stop_reason() == "threshold_stopper: eval/rmse 0.9 > threshold 0.5 at ep 1 ba 4");
  }

  TEST_CASE("through a trainer: the direction comes from the metric; a metric of none is refused at its key") {
    // A metric whose name says nothing of its direction, constant 0.25, lower is better.
    struct Spread : baton::Metric {
      void update(const baton::Outputs&, const baton::Batch&) override {}
      std::vector<double> sums() const override { return {}; }
      double compute(const std::vector<double>&) const override { return 0.25; }
      void reset() override {}
      bool higher_is_better() const override { return false; }
    };
    auto options = baton::test::quiet_options();  // 2 epochs of 3 batches of 32, evaluated after each
    options.metrics = {{"spread", std::make_shared<Spread>()}};
    auto trainer = baton::test::make_trainer(options, "mlp");
    auto stopper = load_plugin(baton::test::plugin_file("threshold_stopper"), "threshold_stopper", "monitor = \"eval/spread\"\nthreshold = 0.5");
    trainer->add_plugin("threshold_stopper", stopper.plugin);
    const auto result = trainer->fit();
    // 0.25 < 0.5 at the first evaluation; maximised it would never have stopped.
    CHECK(result.stop_reason == "threshold_stopper: eval/spread 0.25 < threshold 0.5 at ep 1 ba 3");
    CHECK(result.end.batch == 3);

    // "lr" is logged, but no one says which way is better: without mode, refused before the run, at the key.
    auto lr = baton::test::make_trainer(options, "mlp");
    auto lr_stopper = load_plugin(baton::test::plugin_file("threshold_stopper"), "threshold_stopper", "monitor = \"lr\"\nthreshold = 0.01");
    lr->add_plugin("threshold_stopper", lr_stopper.plugin);
    std::string refused;
    try {
      lr->check();
    } catch (const baton::ConfigError& e) {
      refused = e.what();
    }
    CHECK(contains(refused, "run.toml:1:11: plugins.threshold_stopper.monitor: whether a higher or lower 'lr' is "
                            "better is not known to the run"));
    CHECK(contains(refused, "set mode = \"max\" or \"min\" beside it"));

    // With mode the run needs no direction of its own.
    auto told = baton::test::make_trainer(options, "mlp");
    auto told_stopper =
        load_plugin(baton::test::plugin_file("threshold_stopper"), "threshold_stopper", "monitor = \"lr\"\nthreshold = 0.01\nmode = \"min\"");
    told->add_plugin("threshold_stopper", told_stopper.plugin);
    CHECK_NOTHROW(told->check());
  }

  TEST_CASE("a training metric: checked at epoch_end, and after each batch with stop_on_batch") {
    // train/loss drops below 0.5 in batch 6 (epoch 2). Without stop_on_batch the check is at epoch_end (ba 8).
    const std::vector<double> losses = {1, 0.9, 0.8, 0.7, 0.6, 0.4, 0.3, 0.3, 0.2, 0.1, 0.1, 0.1};
    for (bool on_batch : {false, true}) {
      Driver d("monitor = \"train/loss\"\nthreshold = 0.5\nstop_on_batch = " + std::string(on_batch ? "true" : "false"));
      for (double loss : losses) {
        d.batch(loss);
        if (d.state.progress.now.batch_in_epoch == 4) d.end_epoch();
        if (d.state.stop_requested()) break;
      }
      CHECK(d.state.progress.now.batch == (on_batch ? 6 : 8));
      CHECK(contains(d.state.stop_reason(), on_batch ? "train/loss 0.4 < threshold 0.5 at ep 1 ba 6"
                                                     : "train/loss 0.3 < threshold 0.5 at ep 2 ba 8"));
    }
  }

  TEST_CASE("a resume from the checkpoint written at the stop stops again; an earlier one does not") {
    Driver d("monitor = \"eval/accuracy\"\nthreshold = 0.75");
    d.epochs({{1, 0.5}});
    baton::StateDict before;
    d.plugin.plugin->state_dict(before);
    d.epochs({{1, 0.8}});
    REQUIRE(d.state.stop_requested());
    baton::StateDict at_stop;
    d.plugin.plugin->state_dict(at_stop);

    Driver again("monitor = \"eval/accuracy\"\nthreshold = 0.75");
    again.plugin.plugin->load_state_dict(at_stop);
    again.state.progress.now = d.state.progress.now;
    again.plugin.callback->fit_start(again.state, again.logger);
    CHECK(again.state.stop_reason() ==
          "threshold_stopper: eval/accuracy 0.8 > threshold 0.75 at ep 2 ba 8 (before the resume)");
    again.plugin.callback->fit_end(again.state, again.logger);
    CHECK(again.logger.warnings.empty());  // it checked nothing, rightly

    Driver earlier("monitor = \"eval/accuracy\"\nthreshold = 0.75");
    earlier.plugin.plugin->load_state_dict(before);
    earlier.state.progress.now.epoch = 1;
    earlier.state.progress.now.batch = 4;
    earlier.plugin.callback->fit_start(earlier.state, earlier.logger);
    CHECK_FALSE(earlier.state.stop_requested());
  }

  TEST_CASE("nan never crosses; a missing eval metric is an error; the last batch is not a stop") {
    Driver d("monitor = \"eval/accuracy\"\nthreshold = 0.5");
    CHECK(d.epochs({{1, std::nan("")}, {1, 0.25}}) == 2);
    CHECK_FALSE(d.state.stop_requested());

    Driver typo("monitor = \"eval/acuracy\"\nthreshold = 0.5");
    CHECK_THROWS_WITH_AS(typo.epochs({{1, 0.9}}), doctest::Contains("logged no metric 'eval/acuracy'"), baton::Error);

    Driver last("monitor = \"eval/accuracy\"\nthreshold = 0.5");
    last.state.progress.max_duration = baton::Time(1, baton::TimeUnit::epoch);
    last.epochs({{1, 0.9}});
    CHECK_FALSE(last.state.stop_requested());
  }

  TEST_CASE("bad keys are ConfigErrors naming file, line and key") {
    const std::string file = baton::test::plugin_file("threshold_stopper");
    CHECK(contains(config_error(file, "threshold_stopper", "monitor = \"eval/accuracy\""),
                   "plugins.threshold_stopper.threshold: missing"));
    CHECK(contains(config_error(file, "threshold_stopper", "threshold = 0.9"),
                   "plugins.threshold_stopper.monitor: missing"));
    CHECK(contains(config_error(file, "threshold_stopper", "monitor = \"eval/accuracy\"\nthreshold = \"high\""),
                   "run.toml:2:13: plugins.threshold_stopper.threshold: expected a number, got string \"high\""));
    CHECK(contains(config_error(file, "threshold_stopper", "monitor = \"eval/accuracy\"\nthreshold = 0.9\nmode = \"gt\""),
                   "run.toml:3:8: plugins.threshold_stopper.mode: expected one of \"min\", \"max\""));
    CHECK(contains(config_error(file, "threshold_stopper", "monitor = \"x\"\nthreshold = 1\nstop_on_batch = 1"),
                   "run.toml:3:17: plugins.threshold_stopper.stop_on_batch: expected a boolean"));
    CHECK(contains(config_error(file, "threshold_stopper", "monitor = \"x\"\nthreshold = nan"),
                   "run.toml:2:13: plugins.threshold_stopper.threshold: expected a finite number"));
  }
}

}  // namespace threshold_stopper_test
