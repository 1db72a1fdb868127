// The arrays of tables: [[plugins]], [[loggers]] and [[eval]], each entry's errors at its own keys.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_test_support.h"

// ConfigError, Override, RunConfig, Time, TimeUnit and the helpers.
using namespace baton::config_test;

TEST_SUITE("config") {
  TEST_CASE("[[plugins]] tables") {
    const RunConfig c = parse(R"([run]
seed = 1

[[plugins]]
name = "label_smoothing"
alpha = 0.1
every = "2ba"

[[plugins]]
path = "/opt/libcustom.so"
)");
    REQUIRE(c.plugins.size() == 2);
    CHECK(c.plugins[0].name == "label_smoothing");
    CHECK(c.plugins[0].path.empty());
    CHECK(c.plugins[0].where.line == 4);
    CHECK(c.plugins[0].where.column == 1);
    CHECK(c.plugins[0].config.plugin_name() == "label_smoothing");
    CHECK(c.plugins[0].config.keys() == std::vector<std::string>{"alpha", "every"});
    CHECK(c.plugins[0].config.get<double>("alpha") == 0.1);
    CHECK(c.plugins[0].config.get<Time>("every") == Time(2, TimeUnit::batch));
    CHECK(c.plugins[0].config.where("every").line == 7);
    CHECK(c.plugins[0].config.where("every").column == 9);
    CHECK(c.plugins[1].name.empty());
    CHECK(c.plugins[1].path == "/opt/libcustom.so");
    CHECK(c.plugins[1].config.keys().empty());
    CHECK(c.plugins[1].where.line == 9);
    // Plugins' own keys keep their lines for the plugin's errors.
    try {
      c.plugins[0].config.get<int>("alpha");
      FAIL("no ConfigError");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()) == "cfg.toml:6:9: plugins.label_smoothing.alpha: expected an integer, got float 0.1");
    }
  }

  TEST_CASE("[[plugins]] errors") {
    CHECK(failure("[[plugins]]\nname = \"a\"\npath = \"b.so\"\n").what ==
          "cfg.toml:1:1: plugins.0: expected exactly one of 'name' or 'path', got both");
    CHECK(failure("[[plugins]]\nname = \"a\"\n\n[[plugins]]\nalpha = 1\n").what ==
          "cfg.toml:4:1: plugins.1: expected exactly one of 'name' or 'path', got neither");
    CHECK(failure("[[plugins]]\nname = 3\n").what == "cfg.toml:2:8: plugins.0.name: expected a string, got integer 3");
    CHECK(failure("[[plugins]]\npath = \"\"\n").what ==
          "cfg.toml:2:8: plugins.0.path: expected a non-empty string, got string \"\"");
    CHECK(failure("plugins = 3\n").what ==
          "cfg.toml:1:11: plugins: expected an array of tables ([[plugins]]), got integer 3");
    CHECK(failure("plugins = [{name = \"a\"}, 3]\n").what ==
          "cfg.toml:1:26: plugins.1: expected a table, got integer 3");
  }

  TEST_CASE("[[loggers]]: each names a logger, its other keys kept for it; overrides by index and by name") {
    const std::string file = "[[loggers]]\nname = \"csv\"\n\n[[loggers]]\nname = \"tensorboard\"\ndir = \"tb\"\n";
    const RunConfig c = parse(file, {"loggers.tensorboard.dir=\"boards\"", "loggers.0.file=\"m.csv\""});
    REQUIRE(c.loggers.size() == 2);
    CHECK(c.loggers[0].name == "csv");
    CHECK(c.loggers[0].config.get<std::string>("file") == "m.csv");
    CHECK(c.loggers[1].name == "tensorboard");
    CHECK(c.loggers[1].config.get<std::string>("dir") == "boards");
    CHECK(contains(c.where("loggers.1.dir").file, "--set loggers.tensorboard.dir"));  // located at the --set
    CHECK(parse("").loggers.empty());
    const Failure missing = failure("[[loggers]]\ndir = \"tb\"\n");
    CHECK(missing.key == "loggers.0.name");
    CHECK(missing.line == 1);
    CHECK(failure("[[loggers]]\nname = \"\"\n").key == "loggers.0.name");
    CHECK(failure("[[loggers]]\nname = 3\n").key == "loggers.0.name");
    CHECK(failure("loggers = 3\n").key == "loggers");
    CHECK(failure(file, {"loggers.nope.dir=1"}).what ==
          "--set loggers.nope.dir=1: loggers.nope.dir: unknown logger 'nope'; the [[loggers]] entries are 'csv', "
          "'tensorboard', or use the 0-based index");
    CHECK(failure(file, {"loggers.5.dir=1"}).what ==
          "--set loggers.5.dir=1: loggers.5.dir: no logger at index 5; the config has 2 [[loggers]] entries "
          "(indexes start at 0)");
    CHECK(failure(file, {"loggers.0.name="}).what ==
          "--set loggers.0.name=: loggers.0.name: a [[loggers]] entry needs its name: it cannot be removed");
  }

  TEST_CASE("[[eval]]: sets with a name, their own data or a split of [data], metrics and an interval") {
    const RunConfig config = parse(
        "[[eval]]\nname = \"train\"\nsplit = \"train\"\ninterval = \"2ep\"\n"
        "[[eval]]\nname = \"mnist\"\nmetrics = [\"accuracy\", { name = \"top_k\", k = 2 }]\n"
        "data = { name = \"mnist\", eval_subset = 100 }\n");
    REQUIRE(config.evals.size() == 2);
    CHECK(config.evals[0].name == "train");
    CHECK(config.evals[0].split == "train");
    CHECK_FALSE(config.evals[0].own_data);
    REQUIRE(config.evals[0].interval.has_value());
    CHECK(*config.evals[0].interval == Time(2, TimeUnit::epoch));
    CHECK(config.evals[0].metrics.empty());
    CHECK(config.evals[1].split == "eval");
    CHECK(config.evals[1].own_data);
    CHECK(config.evals[1].data.name == "mnist");
    CHECK(config.evals[1].data.config.get<std::int64_t>("eval_subset") == 100);
    REQUIRE(config.evals[1].metrics.size() == 2);
    CHECK(config.evals[1].metrics[1].name == "top_k");
    CHECK_FALSE(config.evals[1].interval.has_value());
  }

  TEST_CASE("[[eval]] errors name the entry's key and line") {
    auto f = failure("[[eval]]\nsplit = \"train\"\n");
    CHECK(f.key == "eval.0.name");
    f = failure("[[eval]]\nname = \"eval\"\n");
    CHECK(f.key == "eval.0.name");
    CHECK(contains(f.what, "names the evaluation split of [data]"));
    f = failure("[[eval]]\nname = \"a\"\n[[eval]]\nname = \"a\"\n");
    CHECK(f.key == "eval.1.name");
    CHECK(f.line == 4);
    CHECK(contains(f.what, "another [[eval]] is named \"a\""));
    f = failure("[[eval]]\nname = \"a/b\"\n");
    CHECK(contains(f.what, "without '/'"));
    f = failure("[[eval]]\nname = \"a\"\nsplit = \"test\"\n");
    CHECK(f.key == "eval.0.split");
    CHECK(f.line == 3);
    f = failure("[[eval]]\nname = \"a\"\nintervall = \"1ep\"\n");
    CHECK(f.key == "eval.0.intervall");
    CHECK(contains(f.what, "it reads data, interval, metrics, name, split"));
    f = failure("[[eval]]\nname = \"a\"\ninterval = \"3sp\"\n");
    CHECK(f.key == "eval.0.interval");
    f = failure("eval = 3\n");
    CHECK(f.key == "eval");
  }
}
