#include "baton_test.h"

#include <string>
#include <vector>

#include "ema_test_support.h"

using namespace ema_test;

namespace {

// A logger that keeps what it is told.
struct CapturingLogger : baton::Logger {
  std::vector<std::string> lines;
  std::map<std::string, double> metrics;
  void log_metric(std::string_view name, double value) override { metrics[std::string(name)] = value; }
  void info(std::string_view message) override { lines.emplace_back(message); }
  void warn(std::string_view message) override { lines.emplace_back(message); }
};

// What the plugin reports at fit start for `toml`, on the test trainer (3 batches per epoch).
CapturingLogger fit_start_report(const std::string& toml) {
  auto trainer = make_trainer(quiet_options());
  auto ema = load_ema(toml);
  trainer->add_plugin("ema", ema.plugin);
  trainer->evaluate_standalone();  // fires init, which builds the EMA
  CapturingLogger logger;
  baton::run_subscribed(*ema.algorithm, Event::fit_start, trainer->state(), logger);
  return logger;
}

}  // namespace

TEST_SUITE("ema_plugin") {
  TEST_CASE("every bad value is a ConfigError naming file, line and key") {
    struct Case {
      std::string toml;
      std::string where;  // "run.toml:<line>:<column>: plugins.ema.<key>"
      std::string says;
    };
    const std::vector<Case> cases = {
        {"eval = \"ema\"\nhalf_life = \"10ba\"\nsmoothing = 0.9", "run.toml:3:13: plugins.ema.smoothing",
         "not both"},
        {"smoothing = 1.5", "run.toml:1:13: plugins.ema.smoothing", "[0, 1]"},
        {"smoothing = -0.1", "run.toml:1:13: plugins.ema.smoothing", "[0, 1]"},
        {"half_life = \"10ba\"\nupdate_interval = \"1ep\"", "run.toml:2:19: plugins.ema.update_interval",
         "same unit as half_life"},
        {"half_life = \"10sp\"", "run.toml:1:13: plugins.ema.half_life", "ba or ep"},
        {"half_life = \"0.5dur\"", "run.toml:1:13: plugins.ema.half_life", "ba or ep"},
        {"smoothing = 0.9\nupdate_interval = \"0.5dur\"", "run.toml:2:19: plugins.ema.update_interval", "ba or ep"},
        {"half_life = \"1.5ba\"", "run.toml:1:13: plugins.ema.half_life", "1.5ba"},
        {"half_life = \"4ep\"\nupdate_interval = \"2.5ep\"", "run.toml:2:19: plugins.ema.update_interval", "2.5ep"},
        {"half_life = 1000", "run.toml:1:13: plugins.ema.half_life", "time string"},
        {"smoothing = 0.9\nupdate_interval = \"0ba\"", "run.toml:2:19: plugins.ema.update_interval", "positive"},
        {"smoothing = 0.9\nema_start = \"100sp\"", "run.toml:2:13: plugins.ema.ema_start", "dur, ba or ep"},
        {"smoothing = 0.9\nema_start = \"1.5dur\"", "run.toml:2:13: plugins.ema.ema_start", "[0, 1]"},
        {"smoothing = 0.9\nema_start = \"2.5ep\"", "run.toml:2:13: plugins.ema.ema_start", "2.5ep"},
        {"smoothing = 0.9\nwarmup = \"linear\"", "run.toml:2:10: plugins.ema.warmup", "\"none\", \"tf\", \"power\""},
        {"smoothing = 0.9\ninv_gamma = 2.0", "run.toml:2:13: plugins.ema.inv_gamma", "only used with warmup"},
        {"smoothing = 0.9\nwarmup = \"tf\"\npower = 0.5", "run.toml:3:9: plugins.ema.power", "only used with warmup"},
        {"smoothing = 0.9\nwarmup = \"power\"\npower = -1.0", "run.toml:3:9: plugins.ema.power", "positive"},
        {"smoothing = 0.9\nwarmup = \"power\"\ninv_gamma = 0", "run.toml:3:13: plugins.ema.inv_gamma", "positive"},
        {"smoothing = 0.9\nwarmup = \"power\"\nmin_smoothing = 2.0", "run.toml:3:17: plugins.ema.min_smoothing",
         "[0, 1]"},
        {"smoothing = 0.9\nbuffers = \"mean\"", "run.toml:2:11: plugins.ema.buffers", "\"average\", \"copy\""},
        {"smoothing = 0.9\nexclude = \"fc*\"", "run.toml:2:11: plugins.ema.exclude", "array of strings"},
        {"smoothing = 0.9\nexclude = [\"\"]", "run.toml:2:11: plugins.ema.exclude", "empty pattern"},
        {"smoothing = 0.9\ndtype = \"bfloat16\"", "run.toml:2:9: plugins.ema.dtype", "\"auto\", \"float32\""},
        {"smoothing = 0.9\ndevice = \"cuda\"", "run.toml:2:10: plugins.ema.device", "\"auto\", \"cpu\""},
        {"smoothing = 0.9\nsharded = \"yes\"", "run.toml:2:11: plugins.ema.sharded", "boolean"},
        {"smoothing = 0.9\neval = \"all\"", "run.toml:2:8: plugins.ema.eval", "\"ema\", \"raw\", \"both\""},
        {"smoothing = 0.9\nselect = { mode = \"max\" }", "plugins.ema.select.metric", "missing"},
        {"smoothing = 0.9\nselect = { metric = \"eval/accuracy\", mode = \"best\" }",
         "run.toml:2:45: plugins.ema.select.mode", "\"min\", \"max\""},
        {"smoothing = 0.9\nselect = { metric = \"eval/accuracy\", mode = \"max\", keep = 0 }",
         "run.toml:2:59: plugins.ema.select.keep", "at least 1"},
        {"smoothing = 0.9\nselect = { metric = \"eval/loss\", mode = \"min\", kep = 2 }",
         "run.toml:2:48: plugins.ema.select.kep", "unknown key"},
        {"smoothing = 0.9\nhalflife = \"10ba\"", "run.toml:2:1: plugins.ema.halflife", "unknown key"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.toml);
      std::string error = config_error(c.toml);
      CHECK(contains(error, c.where));
      CHECK(contains(error, c.says));
    }
  }

  TEST_CASE("the getters' errors say what the key is for") {
    // The whole message, so a change in how PluginConfig words its errors shows here, where plugin authors look.
    CHECK(config_error("smoothing = 1.5") ==
          "run.toml:1:13: plugins.ema.smoothing: expected a number in [0, 1] (the weight kept per update), got float "
          "1.5");
    CHECK(config_error("smoothing = 0.9\nupdate_interval = \"0ba\"") ==
          "run.toml:2:19: plugins.ema.update_interval: expected a time > 0 (a positive number of batches or epochs "
          "between updates), got string \"0ba\"");
    CHECK(config_error("smoothing = 0.9\nema_start = \"1.5dur\"") ==
          "run.toml:2:13: plugins.ema.ema_start: expected a fraction of the run <= 1dur (when averaging starts: a "
          "fraction of the run in [0, 1], a batch or an epoch), got string \"1.5dur\"");
    CHECK(config_error("smoothing = 0.9\nselect = { metric = \"eval/accuracy\", mode = \"max\", keep = 0 }") ==
          "run.toml:2:59: plugins.ema.select.keep: expected an integer >= 1 (at least 1 checkpoint to keep), got "
          "integer 0");
    // TOML's inf is no positive number either.
    CHECK(contains(config_error("smoothing = 0.9\nwarmup = \"power\"\ninv_gamma = inf"),
                   "run.toml:3:13: plugins.ema.inv_gamma: expected a finite number, got float inf"));
    CHECK(contains(config_error("half_life = \"4ba\"\nposthoc = { sigma_rels = [0.05, 0.1], "
                                "snapshot_every = \"0ep\" }"),
                   "plugins.ema.posthoc.snapshot_every: expected a time > 0, got string \"0ep\""));
  }

  TEST_CASE("select without mode is accepted: the metric's own direction ranks (ema_selection_test)") {
    CHECK(config_error("smoothing = 0.9\nselect = { metric = \"eval/accuracy\" }") == "");
    CHECK(config_error("smoothing = 0.9\nselect = { metric = \"eval/accuracy\", keep = 2 }") == "");
  }

  TEST_CASE("neither half_life nor smoothing is an error naming both keys") {
    std::string error = config_error("eval = \"ema\"");
    CHECK(contains(error, "run.toml"));
    CHECK(contains(error, "plugins.ema.half_life"));
    CHECK(contains(error, "exactly one of half_life"));
    CHECK(contains(error, "smoothing"));
  }

  TEST_CASE("the effective smoothing and the half life in batches are reported at fit start") {
    // s = 2^(-interval / half_life): 2^(-1/1000) = 0.99930709..., 2^(-10/1000) = 0.99309249...
    auto per_batch = fit_start_report("half_life = \"1000ba\"");
    CHECK(per_batch.metrics.at("ema/smoothing") == doctest::Approx(0.9993070929904525).epsilon(1e-12));
    CHECK(per_batch.metrics.at("ema/half_life_batches") == 1000);
    REQUIRE(per_batch.lines.size() == 1);
    CHECK(contains(per_batch.lines[0], "smoothing 0.999307 per update"));
    CHECK(contains(per_batch.lines[0], "half life is 1000 batches"));

    auto every_ten = fit_start_report("half_life = \"1000ba\"\nupdate_interval = \"10ba\"");
    CHECK(every_ten.metrics.at("ema/smoothing") == doctest::Approx(0.9930924954370359).epsilon(1e-12));
    CHECK(contains(every_ten.lines.at(0), "smoothing 0.993092 per update, one update every 10ba"));
    CHECK(contains(every_ten.lines.at(0), "half life is 1000 batches"));

    // In epochs: 2 epochs of 3 batches; s = 2^(-1/2).
    auto epochs = fit_start_report("half_life = \"2ep\"");
    CHECK(epochs.metrics.at("ema/smoothing") == doctest::Approx(0.7071067811865476).epsilon(1e-12));
    CHECK(epochs.metrics.at("ema/half_life_batches") == 6);

    // A per-update smoothing is not rescaled by the interval: 0.5 every 2 batches halves every 2 batches.
    auto direct = fit_start_report("smoothing = 0.5\nupdate_interval = \"2ba\"");
    CHECK(direct.metrics.at("ema/smoothing") == 0.5);
    CHECK(direct.metrics.at("ema/half_life_batches") == doctest::Approx(2.0).epsilon(1e-12));
    CHECK(contains(direct.lines.at(0), "half life is 2 batches"));
  }

  TEST_CASE("half_life = \"0ba\" means no averaging; smoothing needs no update_interval") {
    auto zero = fit_start_report("half_life = \"0ba\"");
    CHECK(zero.metrics.at("ema/smoothing") == 0.0);
    CHECK(contains(zero.lines.at(0), "no averaging"));

    auto trainer = make_trainer(quiet_options());
    auto ema = load_ema("half_life = \"0ba\"");
    trainer->add_plugin("ema", ema.plugin);
    trainer->fit();
    // s = 0: after the last update the EMA is the last weights.
    CHECK(max_difference(shadow_of(*ema.plugin), copy_state(trainer->model())) < 1e-6);

    auto plain = make_trainer(quiet_options());
    auto smoothing_only = load_ema("smoothing = 0.9");  // Composer crashes here (no update_interval)
    plain->add_plugin("ema", smoothing_only.plugin);
    CHECK_NOTHROW(plain->fit());
    CHECK(plain->state().metrics.at("ema/smoothing") == 0.9);
  }
}
