// speed_monitor's window arithmetic on a clock the test moves by hand, and the built plugin through the loader.
#include "baton_test.h"

#include <string>

#include "monitor_test_support.h"
#include "speed_monitor.h"
#include "plugin_files.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace speed_monitor_test {

using namespace monitor_test;
using baton::speed_monitor::SpeedMonitor;

namespace {

// SpeedMonitor on a clock that only moves when the test says, with a State whose timestamp the test sets.
struct Driver {
  double now = 1000;  // seconds on the test's clock
  baton::State state;
  RecordingLogger logger;
  SpeedMonitor monitor;

  explicit Driver(const std::string& toml)
      : monitor(baton::PluginConfig::from_toml(toml, "speed_monitor", "run.toml"), [this] { return now; }) {}

  // One batch of `samples` (as the timestamp counts them) that takes `seconds`.
  void batch(double seconds, std::int64_t samples) {
    logger.metrics.clear();
    monitor.before_dataloader(state, logger);
    now += seconds;
    state.progress.now.batch += 1;
    state.progress.now.sample += samples;
    monitor.batch_end(state, logger);
  }
  void evaluation(double seconds) {
    logger.metrics.clear();
    monitor.eval_before_all(state, logger);
    now += seconds;
    monitor.eval_after_all(state, logger);
  }
};

}  // namespace

TEST_SUITE("speed_monitor") {
  TEST_CASE("throughput over the last window_size batches; evaluation and gaps between batches count apart") {
    Driver d("window_size = 3");
    d.state.facts.set_ranks(0, 2);
    d.batch(1, 32);
    CHECK_FALSE(d.logger.logged("throughput/batches_per_sec"));  // the window is not full yet
    CHECK(d.logger.last("wall_clock/train") == 1);
    d.batch(2, 32);
    CHECK_FALSE(d.logger.logged("throughput/samples_per_sec"));
    CHECK(d.logger.last("wall_clock/train") == 3);

    // Batches of 1, 2, 3 s: 3 batches in 6 s, 96 samples in 6 s.
    d.batch(3, 32);
    CHECK(d.logger.last("throughput/batches_per_sec") == 0.5);
    CHECK(d.logger.last("throughput/samples_per_sec") == 16);
    CHECK(d.logger.last("throughput/device/batches_per_sec") == 0.25);  // per rank: world_size 2
    CHECK(d.logger.last("throughput/device/samples_per_sec") == 8);
    CHECK(d.logger.last("wall_clock/train") == 6);
    CHECK(d.logger.last("wall_clock/val") == 0);

    // A 10 s evaluation and a 5 s pause (a checkpoint) before the next batch: neither is training time.
    d.evaluation(10);
    CHECK(d.logger.last("wall_clock/val") == 10);
    CHECK(d.logger.last("wall_clock/total") == 16);
    d.now += 5;

    // The window slides to 2, 3, 4 s: 3 batches in 9 s, 96 samples.
    d.batch(4, 32);
    CHECK(d.logger.last("throughput/batches_per_sec") == doctest::Approx(3.0 / 9.0).epsilon(1e-12));
    CHECK(d.logger.last("throughput/samples_per_sec") == doctest::Approx(96.0 / 9.0).epsilon(1e-12));
    CHECK(d.logger.last("wall_clock/train") == 10);
    CHECK(d.logger.last("wall_clock/total") == 20);

    // A short last batch (16 samples in 1 s): the window is 3, 4, 1 s with 32 + 32 + 16 samples.
    d.batch(1, 16);
    CHECK(d.logger.last("throughput/batches_per_sec") == 0.375);
    CHECK(d.logger.last("throughput/samples_per_sec") == 10);
    CHECK(d.logger.last("wall_clock/train") == 11);

    // The totals carry over a resume; the window starts empty.
    baton::StateDict saved;
    d.monitor.state_dict(saved);
    Driver resumed("window_size = 3");
    resumed.monitor.load_state_dict(saved);
    resumed.batch(2, 32);
    CHECK(resumed.logger.last("wall_clock/train") == 13);
    CHECK(resumed.logger.last("wall_clock/val") == 10);
    CHECK(resumed.logger.last("wall_clock/total") == 23);
    CHECK_FALSE(resumed.logger.logged("throughput/batches_per_sec"));
  }

  TEST_CASE("declared: its metrics, throughput higher-is-better, the wall-clock times without a direction") {
    Driver d("window_size = 3");
    baton::Declarations run;
    d.monitor.declare(run);
    CHECK(run.metrics().size() == 7);
    for (const char* name : {"throughput/batches_per_sec", "throughput/samples_per_sec",
                             "throughput/device/batches_per_sec", "throughput/device/samples_per_sec"}) {
      CAPTURE(name);
      REQUIRE(run.directions().count(name) == 1);
      CHECK(run.directions().at(name) == true);
    }
    for (const char* name : {"wall_clock/train", "wall_clock/val", "wall_clock/total"}) {
      CAPTURE(name);
      CHECK(run.directions().count(name) == 0);
    }
  }

  TEST_CASE("window_size 1: every batch on its own; the default window is Composer's 100 batches") {
    Driver one("window_size = 1");
    one.batch(0.5, 64);
    CHECK(one.logger.last("throughput/batches_per_sec") == 2);
    CHECK(one.logger.last("throughput/samples_per_sec") == 128);

    Driver fallback("");
    for (int i = 0; i < 99; ++i) fallback.batch(0.25, 8);
    CHECK_FALSE(fallback.logger.logged("throughput/batches_per_sec"));
    fallback.batch(0.25, 8);  // the 100th: 100 batches in 25 s, 800 samples
    CHECK(fallback.logger.last("throughput/batches_per_sec") == 4);
    CHECK(fallback.logger.last("throughput/samples_per_sec") == 32);
  }

  TEST_CASE("the built plugin: bad window_size is a ConfigError at its line; it times batches on a real clock") {
    const std::string file = baton::test::plugin_file("speed_monitor");
    CHECK(contains(config_error(file, "speed_monitor", "window_size = 0"),
                   "run.toml:1:15: plugins.speed_monitor.window_size: expected a number of batches >= 1, got 0"));
    CHECK(contains(config_error(file, "speed_monitor", "window_size = \"100ba\""),
                   "run.toml:1:15: plugins.speed_monitor.window_size: expected an integer"));
    CHECK(contains(config_error(file, "speed_monitor", "window = 10"), "window"));

    auto plugin = load_plugin(file, "speed_monitor", "window_size = 1");
    REQUIRE(plugin.callback != nullptr);
    baton::State state;
    RecordingLogger logger;
    plugin.callback->before_dataloader(state, logger);
    state.progress.now.sample = 10;
    plugin.callback->batch_end(state, logger);
    CHECK(logger.last("wall_clock/train") >= 0);
    CHECK(logger.logged("throughput/samples_per_sec") == (logger.last("wall_clock/train") > 0));
  }
}

}  // namespace speed_monitor_test
