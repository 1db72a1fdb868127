// The configuration written back (config_resolved.cpp): the stored text checkpoints keep, `baton check --print`'s,
// and what changed between two.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <toml++/toml.h>

#include "config/config.h"
#include "config/config_test_support.h"
#include "config/settings_table.h"
#include "sdk/toml_node.h"

// ConfigError, Override, RunConfig, Time, TimeUnit and the helpers.
using namespace baton::config_test;

TEST_SUITE("config") {
  TEST_CASE("issue 24 §17: the resolved configuration, overrides applied and baton's defaults filled in") {
    const RunConfig c = parse("[trainer]\nmax_duration = \"2ep\"\n[model]\nname = \"mlp\"\nwidths = [8]\n",
                              {"run.seed=3", "trainer.max_duration=3ep"});
    const std::string text = baton::resolved_config_text(c);
    CHECK(text.rfind("# cfg.toml with --set run.seed=3 --set trainer.max_duration=3ep\n", 0) == 0);
    const auto has = [&](const std::string& key, const std::string& value) {
      return contains(text, key + " = " + value) || contains(text, key + " = '" + value + "'") ||
             contains(text, key + " = \"" + value + "\"");
    };
    CHECK(has("seed", "3"));
    CHECK(has("max_duration", "3ep"));
    CHECK(has("eval_interval", "1ep"));       // a default (config.md)
    CHECK(has("log_interval", "50ba"));       // a default
    CHECK(has("batch_size", "128"));          // a default
    CHECK(has("keep_last", "0"));
    CHECK(has("backend", "gloo"));
    CHECK(has("name", "sgd"));                // [optimizer]'s default component
    CHECK((contains(text, "widths = [ 8 ]") || contains(text, "widths = [8]")));  // a component's key, as given
    // It reads back as the same configuration.
    const RunConfig again = parse(text);
    CHECK(again.settings.seed == 3);
    CHECK(again.settings.max_duration == Time(3, TimeUnit::epoch));
  }

  TEST_CASE("issue 37: the stored configuration writes a number as the user wrote it, and reads back the same") {
    const RunConfig c = parse("[optimizer]\nlr = 0.05\nmomentum = 0.30000000000000004\neps = 1e-8\n"
                              "[loss]\nname = \"smooth_l1\"\nbeta = 2.0\n");
    const std::string& stored = c.resolved_text;
    CHECK(contains(stored, "\nlr = 0.05\n"));
    CHECK_FALSE(contains(stored, "0.050000000000000003"));  // toml++'s 17 digits
    CHECK(contains(stored, "\nbeta = 2.0\n"));              // a whole number stays a float
    CHECK(contains(stored, "\neps = 1e-08\n"));
    // 0.1 + 0.2 needs all 17 digits: fewer read back as 0.3.
    CHECK(contains(stored, "\nmomentum = 0.30000000000000004\n"));
    CHECK(contains(baton::resolved_config_text(c), "\nlr = 0.05\n"));
    const RunConfig again = parse(stored);
    CHECK(again.optimizer.config.get<double>("lr") == 0.05);
    CHECK(again.optimizer.config.get<double>("momentum") == 0.1 + 0.2);
    CHECK(again.optimizer.config.get<double>("momentum") != 0.3);
    CHECK(again.optimizer.config.get<double>("eps") == 1e-8);
    CHECK(again.loss.config.get<double>("beta") == 2.0);
  }

  TEST_CASE("issue 37: a document's tables, arrays of tables, inline tables and quoted keys read back the same") {
    const std::string text = R"(top = 1
when = 1979-05-27T07:32:00Z
[data]
metrics = ["accuracy", { name = "top_k", k = 3 }]
nested = { a = 1, b = { c = 2.5 } }
"a b" = "tab\there"
[data.sub]
x = 0.05
[[plugins]]
name = "ema"
w = [1.5, 2, -0.1]
[plugins.inner]
z = inf
[[plugins]]
name = "b\"q"
)";
    const toml::table root = toml::parse(text);
    const std::string written = baton::toml_detail::document_text(root);
    CAPTURE(written);
    CHECK(toml::parse(written) == root);
    CHECK(written.rfind("top = 1\nwhen = 1979-05-27T07:32:00Z\n\n[data]\n", 0) == 0);
    CHECK(contains(written, "\n\"a b\" = \"tab\\u0009here\"\n"));
    CHECK(contains(written, "\nmetrics = [\"accuracy\", { k = 3, name = \"top_k\" }]\n"));
    CHECK(contains(written, "\n[data.sub]\nx = 0.05\n"));
    CHECK(contains(written, "\n[[plugins]]\nname = \"ema\"\nw = [1.5, 2, -0.1]\n\n[plugins.inner]\nz = inf\n"));
    CHECK(contains(written, "\n[[plugins]]\nname = \"b\\\"q\"\n"));
  }

  TEST_CASE("issue 37: every setting of the table is written back, and reads back as it was") {
    const RunConfig c = parse(R"([run]
seed = 7
[data]
batch_size = 64
eval_batch_size = 200
workers = 2
prefetch = 3
[trainer]
max_duration = "300ba"
eval_interval = "0.25dur"
device = "cuda:1"
cpu_allocator = "system"
threads = 2
precision = "amp_fp16"
microbatch_size = 8
log_interval = "10ba"
progress = false
allow_nonfinite = true
time_limit = "2h"
[checkpoint]
save_interval = "100ba"
keep_last = 3
dir = "ckpt"
)");
    const RunConfig again = parse(baton::resolved_config_text(c));
    const baton::TrainerSettings defaults;
    for (const auto& setting : baton::settings_table::settings()) {
      CAPTURE(setting.config_key());
      // Sharding refuses periodic saves (for now), so it takes its own value in the file below.
      if (setting.config_key() == "distributed.sharding") continue;
      // cuda_graphs refuses amp_fp16 and microbatching, which the file above sets: its own file below too.
      if (setting.config_key() == "trainer.cuda_graphs") continue;
      // The file above gives every setting a value of its own, so the round trip cannot pass on the defaults.
      CHECK(baton::settings_table::value_text(c.settings, setting) !=
            baton::settings_table::value_text(defaults, setting));
      CHECK(baton::settings_table::value_text(again.settings, setting) ==
            baton::settings_table::value_text(c.settings, setting));
    }
    CHECK(again.settings.eval_interval == Time(0.25, TimeUnit::duration));
    CHECK(again.settings.precision == baton::Precision::amp_fp16);
    const RunConfig sharded = parse("[distributed]\nsharding = \"zero2\"\n[checkpoint]\nsave_interval = \"0ep\"\n");
    CHECK(sharded.settings.sharding == baton::Sharding::zero2);
    CHECK(parse(baton::resolved_config_text(sharded)).settings.sharding == baton::Sharding::zero2);
    const RunConfig graphs = parse("[trainer]\ndevice = \"cuda\"\ncuda_graphs = true\n");
    CHECK(parse(baton::resolved_config_text(graphs)).settings.cuda_graphs);
    CHECK(again.settings.checkpoint_dir == "ckpt");
    // prefetch 0 is written as the count it means: two per worker.
    CHECK(contains(baton::resolved_config_text(parse("[data]\nworkers = 3\n")), "\nprefetch = 6\n"));
  }

  TEST_CASE("changed_settings: the keys whose values differ, numbers as written") {
    const std::string before = parse("[optimizer]\nlr = 0.05\n[data]\nbatch_size = 64\n").resolved_text;
    const std::string after =
        parse("[optimizer]\nlr = 0.1\n[data]\nbatch_size = 64\nname = \"mnist\"\n").resolved_text;
    CHECK(baton::changed_settings(before, after, {"data", "optimizer"}) ==
          std::vector<std::string>{"data.name (not set, now \"mnist\")", "optimizer.lr (0.05, now 0.1)"});
    CHECK(baton::changed_settings(before, after, {"model"}).empty());
    CHECK(baton::changed_settings("not = = toml", after, {"data"}).empty());
  }
}
