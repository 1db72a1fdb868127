// --set overrides (config_overrides.cpp): applied to the file before it is checked, errors located at the --set.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_test_support.h"

// ConfigError, Override, RunConfig, Time, TimeUnit and the helpers.
using namespace baton::config_test;

TEST_SUITE("config") {
  TEST_CASE("overrides replace and add values before checking") {
    const RunConfig c = parse("[trainer]\nmax_duration = \"1ep\"\n[optimizer]\nlr = 0.5\n",
                              {"trainer.max_duration=2ep", "optimizer.lr=0.1", "run.name=\"exp 1\"",
                               "data.batch_size=64", "model.widths=[8, 16]", "trainer.progress=false",
                               "trainer.device=cuda:0", "scheduler.name=cosine"});
    CHECK(c.settings.max_duration == Time(2, TimeUnit::epoch));
    CHECK(c.optimizer.config.get<double>("lr") == 0.1);
    CHECK(c.run.name == "exp 1");  // sections absent from the file are created
    CHECK(c.settings.batch_size == 64);
    CHECK(c.model.config.get<std::vector<std::int64_t>>("widths") == std::vector<std::int64_t>{8, 16});
    CHECK_FALSE(c.settings.progress);
    CHECK(c.settings.device == "cuda:0");
    CHECK(c.scheduler.name == "cosine");
    CHECK(c.settings.checkpoint_dir == "runs/exp 1/checkpoints");
    // Later overrides win.
    CHECK(parse("", {"run.seed=1", "run.seed=2"}).settings.seed == 2);
  }

  TEST_CASE("a wrong override gives the same error, located at the --set") {
    CHECK(failure("[data]\nbatch_size = 32\n", {"data.batch_size=abc"}).what ==
          "--set data.batch_size=abc: data.batch_size: expected an integer, got string \"abc\"");
    CHECK(failure("", {"data.batch_size=0"}).what ==
          "--set data.batch_size=0: data.batch_size: expected an integer >= 1, got integer 0");
    CHECK(failure("", {"trainer.max_duration=0.5dur"}).what ==
          "--set trainer.max_duration=0.5dur: trainer.max_duration: expected a time in ep, ba or sp, got string "
          "\"0.5dur\"");
    const Failure unknown = failure("[run]\nseed = 1\n", {"run.sed=3"});
    CHECK(unknown.what == "--set run.sed=3: run.sed: unknown key 'sed' for [run]; it reads dir, name, seed");
    CHECK(unknown.line == 0);
    CHECK(failure("", {"foo.bar=1"}).what.rfind("--set foo.bar=1: foo.bar: unknown section 'foo'", 0) == 0);
    CHECK(failure("", {"trainer=1"}).what.rfind("--set trainer=1: trainer: expected section.key", 0) == 0);
    CHECK(failure("", {"trainer.a.b=1"}).what == "--set trainer.a.b=1: trainer.a.b: expected trainer.<key>");
    CHECK(failure("", {"run..seed=1"}).key == "run..seed");
  }

  TEST_CASE("issue 24 §17: --set key= removes a key, an integer beyond 64 bits says so, --seed is located") {
    const std::string file = "[run]\nseed = 5\n[optimizer]\nname = \"sgd\"\nmomentum = 0.5\n"
                             "[[plugins]]\nname = \"ema\"\ndecay = 0.9\n";
    // Removed: the default applies (seed 42, config.md's default; sgd reads its own momentum default).
    const RunConfig removed = parse(file, {"run.seed=", "optimizer.momentum=", "plugins.ema.decay=", "run.absent="});
    CHECK(removed.settings.seed == 42);
    CHECK_FALSE(removed.optimizer.config.has("momentum"));
    CHECK_FALSE(removed.plugins[0].config.has("decay"));
    // So `--set optimizer.name=adam` on an sgd file works once sgd's key is removed (config.md).
    CHECK(parse(file, {"optimizer.momentum=", "optimizer.name=adam"}).optimizer.name == "adam");
    // A quoted empty string is a value, not a removal (and run.name refuses it).
    CHECK(failure(file, {"run.name=\"\""}).what ==
          "--set run.name=\"\": run.name: expected a non-empty string, got string \"\"");
    CHECK(failure(file, {"plugins.ema.name="}).what ==
          "--set plugins.ema.name=: plugins.ema.name: a [[plugins]] entry needs its name: it cannot be removed");

    CHECK(failure("", {"run.seed=99999999999999999999"}).what ==
          "--set run.seed=99999999999999999999: run.seed: integer 99999999999999999999 does not fit in 64 bits (the "
          "largest is 9223372036854775807)");
    CHECK(failure("", {"data.batch_size=-99999999999999999999"}).what.find("does not fit in 64 bits") !=
          std::string::npos);

    std::vector<Override> seed{Override{"run.seed", "x", "--seed x"}};
    try {
      baton::parse_config("", "cfg.toml", seed);
      FAIL("no ConfigError");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()) == "--seed x: run.seed: expected an integer, got string \"x\"");
    }
    seed[0].value = "7";
    CHECK(baton::parse_config("", "cfg.toml", seed).settings.seed == 7);
  }

  TEST_CASE("Override::parse") {
    const Override o = Override::parse("trainer.max_duration=2ep");
    CHECK(o.key == "trainer.max_duration");
    CHECK(o.value == "2ep");
    CHECK(Override::parse("run.name=a=b").value == "a=b");
    CHECK(Override::parse("run.name=").value.empty());
    try {
      Override::parse("trainer.max_duration");
      FAIL("no ConfigError");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()) == "--set trainer.max_duration: expected section.key=value, got no '='");
    }
    CHECK_THROWS_AS(Override::parse("=3"), ConfigError);
  }

  TEST_CASE("plugin overrides by index and by name") {
    const std::string file = "[[plugins]]\nname = \"ema\"\ndecay = 0.9\n\n[[plugins]]\nname = \"clip\"\nmax = 1.0\n";
    const RunConfig c = parse(file, {"plugins.0.decay=0.99", "plugins.clip.max=2", "plugins.clip.mode=\"norm\""});
    REQUIRE(c.plugins.size() == 2);
    CHECK(c.plugins[0].config.get<double>("decay") == 0.99);
    CHECK(c.plugins[1].config.get<double>("max") == 2.0);
    CHECK(c.plugins[1].config.get<std::string>("mode") == "norm");
    // A wrongly typed plugin override is reported by the plugin's read, at the --set.
    const RunConfig wrong = parse(file, {"plugins.ema.decay=high"});
    try {
      wrong.plugins[0].config.get<double>("decay");
      FAIL("no ConfigError");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()) ==
            "--set plugins.ema.decay=high: plugins.ema.decay: expected a number, got string \"high\"");
    }
    CHECK(failure(file, {"plugins.nope.decay=1"}).what ==
          "--set plugins.nope.decay=1: plugins.nope.decay: unknown plugin 'nope'; the [[plugins]] entries are 'ema', "
          "'clip', or use the 0-based index");
    CHECK(failure(file, {"plugins.2.decay=1"}).what ==
          "--set plugins.2.decay=1: plugins.2.decay: no plugin at index 2; the config has 2 [[plugins]] entries "
          "(indexes start at 0)");
    CHECK(failure("", {"plugins.0.decay=1"}).what ==
          "--set plugins.0.decay=1: plugins.0.decay: the config has no [[plugins]] entries to override");
    CHECK(failure(file, {"plugins.ema=1"}).key == "plugins.ema");
    CHECK(failure(file + "\n[[plugins]]\nname = \"ema\"\n", {"plugins.ema.decay=1"}).key == "plugins.ema.decay");
  }
}
