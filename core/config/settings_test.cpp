#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "baton/settings.h"
#include "config/config.h"
#include "config/config_test_support.h"
#include "config/settings_table.h"

using baton::Precision;
using baton::SettingProblem;
using baton::Time;
using baton::TimeUnit;
using baton::TrainerSettings;
using baton::settings_table::Setting;

namespace {

// "key: expected ..., got ..." for each problem, in order.
std::vector<std::string> problems(const TrainerSettings& settings) {
  std::vector<std::string> out;
  for (const SettingProblem& p : baton::setting_problems(settings))
    out.push_back(p.key + " (" + p.option + "): expected " + p.expected + ", got " + p.got);
  return out;
}

std::string only_problem(const TrainerSettings& settings) {
  const auto list = problems(settings);
  REQUIRE(list.size() == 1);
  return list.front();
}

}  // namespace

TEST_SUITE("settings") {
  TEST_CASE("the defaults are valid, and a config file's defaults are TrainerSettings' own") {
    const TrainerSettings defaults;
    CHECK(problems(defaults).empty());
    const baton::RunConfig config = baton::parse_config("", "cfg.toml");
    const TrainerSettings& parsed = config.settings;
    CHECK(parsed.max_duration == defaults.max_duration);
    CHECK(parsed.eval_interval == defaults.eval_interval);
    CHECK(parsed.batch_size == defaults.batch_size);
    CHECK(parsed.eval_batch_size == defaults.eval_batch_size);
    CHECK(parsed.workers == defaults.workers);
    CHECK(parsed.prefetch_batches() == defaults.prefetch_batches());
    CHECK(parsed.seed == defaults.seed);
    CHECK(parsed.seed == baton::kDefaultSeed);
    CHECK(parsed.threads == defaults.threads);
    CHECK(parsed.device == defaults.device);
    CHECK(parsed.precision == defaults.precision);
    CHECK(parsed.microbatch_size == defaults.microbatch_size);
    CHECK(parsed.log_interval == defaults.log_interval);
    CHECK(parsed.progress == defaults.progress);
    CHECK(parsed.allow_nonfinite == defaults.allow_nonfinite);
    CHECK(parsed.save_interval == defaults.save_interval);
    CHECK(parsed.keep_last == defaults.keep_last);
    // The one default a config fills in: the checkpoints go in the run folder.
    CHECK(defaults.checkpoint_dir.empty());
    CHECK(parsed.checkpoint_dir == "runs/baton/checkpoints");
  }

  TEST_CASE("prefetch 0 is two per worker, two with no worker") {
    TrainerSettings s;
    s.workers = 4;
    CHECK(s.prefetch_batches() == 8);
    s.workers = 0;
    CHECK(s.prefetch_batches() == 2);
    s.prefetch = 3;
    CHECK(s.prefetch_batches() == 3);
  }

  TEST_CASE("each setting's rule, under its config key and its option name") {
    TrainerSettings s;
    s.batch_size = 0;
    CHECK(only_problem(s) == "data.batch_size (batch_size): expected an integer >= 1, got 0");
    s = {};
    s.eval_batch_size = -3;
    CHECK(only_problem(s) == "data.eval_batch_size (eval_batch_size): expected an integer >= 1, got -3");
    s = {};
    s.workers = 257;
    CHECK(only_problem(s) == "data.workers (workers): expected an integer in [0, 256], got 257");
    s = {};
    s.workers = 4;
    s.prefetch = 3;
    CHECK(only_problem(s) ==
          "data.prefetch (prefetch): expected at least workers (4: each worker fetches one of the batches ahead), got 3");
    s.workers = 0;  // no worker: prefetch is not used
    CHECK(problems(s).empty());
    s = {};
    s.threads = -1;
    CHECK(only_problem(s) == "trainer.threads (threads): expected an integer >= 0, got -1");
    s = {};
    s.device = "gpu";
    CHECK(only_problem(s) == "trainer.device (device): expected \"cpu\", \"cuda\" or \"cuda:N\", got \"gpu\"");
    s.device = "cuda:x";
    CHECK(problems(s).size() == 1);
    s = {};
    s.microbatch_size = -1;
    CHECK(only_problem(s) == "trainer.microbatch_size (microbatch_size): expected an integer >= 0, got -1");
    s = {};
    s.keep_last = -2;
    CHECK(only_problem(s) == "checkpoint.keep_last (keep_last): expected an integer >= 0, got -2");
  }

  TEST_CASE("times: each interval's units, zero where it means never") {
    TrainerSettings s;
    s.max_duration = Time(0.5, TimeUnit::duration);
    CHECK(only_problem(s) == "trainer.max_duration (max_duration): expected a time in ep, ba or sp, got 0.5dur");
    s.max_duration = Time(0, TimeUnit::epoch);
    CHECK(only_problem(s) == "trainer.max_duration (max_duration): expected a time > 0, got 0ep");
    s = {};
    s.eval_interval = Time(64, TimeUnit::sample);
    CHECK(only_problem(s) == "trainer.eval_interval (eval_interval): expected a time in ep, ba or dur, got 64sp");
    s.eval_interval = Time(0, TimeUnit::batch);  // 0 disables periodic evaluation
    CHECK(problems(s).empty());
    s.log_interval = Time(1, TimeUnit::epoch);
    CHECK(only_problem(s) == "trainer.log_interval (log_interval): expected a time in ba, got 1ep");
    s = {};
    s.save_interval = Time(0.5, TimeUnit::duration);
    CHECK(only_problem(s) == "checkpoint.save_interval (save_interval): expected a time in ep or ba, got 0.5dur");
    s.save_interval = Time(0, TimeUnit::epoch);
    CHECK(problems(s).empty());
  }

  TEST_CASE("amp_fp16 needs a CUDA device; amp_bf16 runs anywhere") {
    TrainerSettings s;
    s.precision = Precision::amp_bf16;
    CHECK(problems(s).empty());
    s.precision = Precision::amp_fp16;
    const std::string cpu = only_problem(s);
    CHECK(cpu.rfind("trainer.precision (precision): expected fp32 or amp_bf16 on the device \"cpu\"", 0) == 0);
    CHECK(cpu.find("amp_fp16 needs a CUDA device") != std::string::npos);
    s.device = "cuda:1";
    CHECK(problems(s).empty());
  }

  TEST_CASE("every problem is reported, in the members' order") {
    TrainerSettings s;
    s.keep_last = -1;
    s.batch_size = 0;
    const auto list = baton::setting_problems(s);
    REQUIRE(list.size() == 2);
    CHECK(list[0].key == "data.batch_size");
    CHECK(list[1].key == "checkpoint.keep_last");
  }

  TEST_CASE("precision names") {
    for (Precision p : {Precision::fp32, Precision::amp_bf16, Precision::amp_fp16})
      CHECK(baton::precision_from_name(baton::precision_name(p)) == p);
    CHECK_FALSE(baton::precision_from_name("bf16").has_value());
    CHECK_FALSE(baton::precision_from_name("").has_value());
  }

  TEST_CASE("issue 37: one list of precision names, which the config's error lists") {
    CHECK(baton::settings_table::precision_names() == std::vector<std::string>{"fp32", "amp_bf16", "amp_fp16"});
    CHECK(baton::config_test::failure("[trainer]\nprecision = \"bf16\"\n").what ==
          "cfg.toml:2:13: trainer.precision: expected one of \"fp32\", \"amp_bf16\", \"amp_fp16\", got string "
          "\"bf16\"");
  }

  TEST_CASE("issue 37: the config reads every setting of the table from its section, checking its type") {
    for (const Setting& setting : baton::settings_table::settings()) {
      CAPTURE(setting.config_key());
      // A table is no setting's type: the key's reader refuses it there (an unread key would say "unknown key").
      const auto f = baton::config_test::failure("[" + setting.section + "]\n" + setting.key + " = { x = 1 }\n");
      CHECK(f.key == setting.config_key());
      CHECK(f.line == 2);
      CHECK(baton::config_test::contains(f.what, ", got table"));
    }
  }
}
