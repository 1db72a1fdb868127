#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "baton/settings.h"
#include "config/config.h"
#include "config/config_test_support.h"
#include "config/settings_table.h"

using baton::Precision;
using baton::SettingProblem;
using baton::Sharding;
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

// The rows of the first table under docs/config.md's "### `[<section>]`" heading: key -> its cells, trimmed.
std::map<std::string, std::vector<std::string>> documented_keys(const std::string& doc, const std::string& section) {
  std::map<std::string, std::vector<std::string>> rows;
  const std::size_t heading = doc.find("\n### `[" + section + "]`\n");
  REQUIRE_MESSAGE(heading != std::string::npos, "docs/config.md has no section [" << section << "]");
  std::size_t at = doc.find("\n| key |", heading);
  REQUIRE(at != std::string::npos);
  at = doc.find('\n', doc.find('\n', at + 1) + 1);  // past the header and the |---| line
  while (at + 1 < doc.size() && doc[at + 1] == '|') {
    const std::size_t end = doc.find('\n', at + 1);
    const std::string line = doc.substr(at + 1, end - at - 1);
    std::vector<std::string> cells;
    std::size_t from = 1;
    for (std::size_t bar; (bar = line.find('|', from)) != std::string::npos; from = bar + 1) {
      std::string cell = line.substr(from, bar - from);
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
    }
    REQUIRE(cells.size() >= 4);
    REQUIRE(cells[0].size() > 2);
    rows[cells[0].substr(1, cells[0].size() - 2)] = cells;  // `batch_size`
    at = end;
  }
  return rows;
}

// The type column's word for a setting's kind.
std::string documented_type(const Setting& setting) {
  if (std::holds_alternative<bool TrainerSettings::*>(setting.member)) return "boolean";
  if (std::holds_alternative<Time TrainerSettings::*>(setting.member)) return "time";
  if (std::holds_alternative<std::string TrainerSettings::*>(setting.member) ||
      std::holds_alternative<Precision TrainerSettings::*>(setting.member) ||
      std::holds_alternative<Sharding TrainerSettings::*>(setting.member))
    return "string";
  return "integer";
}

// A value as a config file writes it: texts, times and precisions in quotes.
std::string toml_literal(const TrainerSettings& settings, const Setting& setting) {
  const std::string text = baton::settings_table::value_text(settings, setting);
  const bool quoted = std::holds_alternative<Time TrainerSettings::*>(setting.member) ||
                      std::holds_alternative<Precision TrainerSettings::*>(setting.member) ||
                      std::holds_alternative<Sharding TrainerSettings::*>(setting.member);
  return quoted ? "\"" + text + "\"" : text;
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
    s.cpu_allocator = "jemalloc";
    CHECK(only_problem(s) ==
          "trainer.cpu_allocator (cpu_allocator): expected \"caching\", \"compact\" or \"system\", got \"jemalloc\"");
    s.cpu_allocator = "system";
    CHECK(problems(s).empty());
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
    CHECK(only_problem(s) == "checkpoint.save_interval (save_interval): expected a time in ep, ba or s/min/h, got 0.5dur");
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

  TEST_CASE("issue 38: every sharding saves periodically or not") {
    TrainerSettings s;
    for (Time every : {Time(0, TimeUnit::epoch), Time(2, TimeUnit::batch)}) {
      s.save_interval = every;
      for (Sharding mode : {Sharding::none, Sharding::zero1, Sharding::zero2, Sharding::zero3}) {
        s.sharding = mode;
        CHECK(problems(s).empty());
      }
    }
  }

  TEST_CASE("issue 38: one list of sharding names, which the config reads and its error lists") {
    CHECK(baton::settings_table::sharding_names() == std::vector<std::string>{"none", "zero1", "zero2", "zero3"});
    for (Sharding mode : {Sharding::none, Sharding::zero1, Sharding::zero2, Sharding::zero3})
      CHECK(baton::sharding_from_name(baton::sharding_name(mode)) == mode);
    CHECK_FALSE(baton::sharding_from_name("fsdp").has_value());
    CHECK(baton::parse_config("[distributed]\nsharding = \"zero2\"\n[checkpoint]\nsave_interval = \"0ep\"\n",
                              "cfg.toml")
              .settings.sharding == Sharding::zero2);
    CHECK(baton::config_test::failure("[distributed]\nsharding = \"fsdp\"\n").what ==
          "cfg.toml:2:12: distributed.sharding: expected one of \"none\", \"zero1\", \"zero2\", \"zero3\", got "
          "string \"fsdp\"");
    // zero3's units: module names, under zero3 only.
    const auto zero3 = baton::parse_config("[distributed]\nsharding = \"zero3\"\nunits = [\"features\", \"classifier.0\"]\n",
                                           "cfg.toml");
    CHECK(zero3.settings.sharding == Sharding::zero3);
    CHECK(zero3.distributed.units == std::vector<std::string>{"features", "classifier.0"});
    CHECK(baton::parse_config(baton::resolved_config_text(zero3), "resolved.toml").distributed.units ==
          zero3.distributed.units);
    const auto zero2_units = baton::config_test::failure("[distributed]\nsharding = \"zero2\"\nunits = [\"fc\"]\n");
    CHECK(zero2_units.key == "distributed.units");
    CHECK(baton::config_test::contains(zero2_units.what, "under sharding = \"zero3\" only; this run's is \"zero2\""));
    CHECK(baton::config_test::failure("[distributed]\nsharding = \"zero3\"\nunits = [\"fc\", \"\"]\n").what ==
          "cfg.toml:3:9: distributed.units: expected module names, got \"\" at index 1");
    // The default save_interval (1ep) under zero1: sharded checkpoints.
    CHECK(baton::parse_config("[distributed]\nsharding = \"zero1\"\n", "cfg.toml").settings.sharding == Sharding::zero1);
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
    CHECK(baton::settings_table::precision_names() ==
          std::vector<std::string>{"fp32", "amp_bf16", "amp_fp16", "auto"});
    CHECK(baton::config_test::failure("[trainer]\nprecision = \"bf16\"\n").what ==
          "cfg.toml:2:13: trainer.precision: expected one of \"fp32\", \"amp_bf16\", \"amp_fp16\", \"auto\", got "
          "string \"bf16\"");
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

  TEST_CASE("issue 37: docs/config.md documents each setting of the table, its type, default and units; no other") {
    std::ifstream in(std::filesystem::path(BATON_SOURCE_DIR) / "docs" / "config.md");
    REQUIRE(in);
    std::stringstream text;
    text << in.rdbuf();
    const std::string doc = text.str();
    // What a key left out means in a config file (the config fills in checkpoint.dir).
    const TrainerSettings defaults = baton::parse_config("", "cfg.toml").settings;
    const auto& table = baton::settings_table::settings();
    for (const std::string section : {"run", "data", "trainer", "checkpoint", "distributed"}) {
      for (const auto& [key, cells] : documented_keys(doc, section)) {
        CAPTURE(section + "." + key);
        const auto setting = std::find_if(table.begin(), table.end(), [&](const Setting& s) {
          return s.section == section && s.key == key;
        });
        if (setting == table.end()) {
          // The run's folder, the dataset and its metrics are RunConfig's own, not the Trainer's settings (zero3's
          // units and the best checkpoints' table are TrainerOptions', which no setting rule covers).
          const std::vector<std::string> own = {"run.name",          "run.dir",
                                                "data.name",         "data.metrics",
                                                "distributed.backend", "distributed.timeout_seconds",
                                                "distributed.units", "checkpoint.keep_best"};
          CHECK(std::find(own.begin(), own.end(), section + "." + key) != own.end());
          continue;
        }
        CHECK(cells[1] == documented_type(*setting));
        CHECK(cells[2].rfind("`" + toml_literal(defaults, *setting) + "`", 0) == 0);
        if (std::holds_alternative<Time TrainerSettings::*>(setting->member)) {
          // The units in the "allowed" column are the rule's, and "> 0" is there exactly when zero is refused.
          std::vector<TimeUnit> units;
          for (TimeUnit unit : {TimeUnit::epoch, TimeUnit::batch, TimeUnit::sample, TimeUnit::token,
                                TimeUnit::iteration, TimeUnit::duration, TimeUnit::second})
            if (cells[3].find("`" + std::string(baton::unit_suffix(unit)) + "`") != std::string::npos)
              units.push_back(unit);
          CHECK(units == setting->rule.units);
          CHECK((cells[3].find("> 0") != std::string::npos) == setting->rule.positive);
        }
      }
    }
    for (const Setting& setting : table) {
      CAPTURE(setting.config_key());
      CHECK(documented_keys(doc, setting.section).count(setting.key) == 1);
    }
  }
}
