#include "baton_test.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "best_folder.h"
#include "ema_test_support.h"

using namespace ema_test;

namespace {

const char* kSelectByLoss = "smoothing = 0.5\nselect = { metric = \"eval/loss\", mode = \"min\", keep = 2 }";

baton::TrainerOptions selecting_options(const fs::path& dir, Time save_interval = Time(1, TimeUnit::batch)) {
  auto o = quiet_options(dir.string());
  o.eval_interval = Time(1, TimeUnit::batch);
  o.save_interval = save_interval;
  o.keep_last = 2;
  return o;
}

using baton::test::expected_best;
using baton::test::folders_in;
using baton::test::read_bytes;
using baton::test::read_json;

// best/ against the expected ranking, with the top checkpoint's EMA beside best.json.
void check_best_with_ema(const fs::path& run_dir, const std::vector<baton::test::BestEntry>& expected) {
  baton::test::check_best_folder(run_dir, expected, {"ema.safetensors"});
}

// The ConfigError of a run selecting by `select` (the table, on line 3 of run.toml), in a folder named `name`; ""
// when the run was accepted. A refusal comes at init: not a batch trained, nothing selected.
std::string refusal(const std::string& name, const std::string& select) {
  auto dir = baton::test::scratch_dir(name);
  auto trainer = make_trainer(selecting_options(dir));
  auto ema = load_ema("smoothing = 0.5\n\nselect = " + select);
  trainer->add_plugin("ema", ema.plugin);
  const std::string what = baton::test::refusal_before_training(*trainer);
  CHECK_FALSE(fs::exists(dir / "best" / "best.json"));
  return what;
}

}  // namespace

TEST_SUITE("ema_plugin") {
  TEST_CASE("selection keeps the best k checkpoints by the metric, even those keep_last deletes") {
    auto dir = baton::test::scratch_dir("ema-select");
    auto trainer = make_trainer(selecting_options(dir));
    auto ema = load_ema(kSelectByLoss);
    trainer->add_plugin("ema", ema.plugin);
    auto result = trainer->fit();
    REQUIRE(result.evals.size() == 6);

    auto expected = expected_best(result.evals, "eval/loss", /*maximize=*/false, 2);
    check_best_with_ema(dir, expected);
    CHECK(read_json(dir / "best" / "best.json")["metric"] == "eval/loss");
    CHECK(read_json(dir / "best" / "best.json")["mode"] == "min");
    CHECK(folders_in(dir / "checkpoints") == std::set<std::string>{"ba5", "ba6"});  // keep_last = 2
    // The copies are the checkpoints: the top one's EMA file holds the EMA of that batch, readable by name.
    auto top = baton::read_safetensors((dir / "best" / expected[0].name / "ema.safetensors").string());
    CHECK(top.tensors.front().first == trainer->model().named_parameters(true).begin()->key());
  }

  TEST_CASE("an evaluation without a checkpoint at that point selects nothing") {
    auto dir = baton::test::scratch_dir("ema-select-sparse");
    auto options = selecting_options(dir, Time(2, TimeUnit::batch));
    options.keep_last = 0;
    auto trainer = make_trainer(options);
    auto ema = load_ema("smoothing = 0.5\nselect = { metric = \"eval/accuracy\", mode = \"max\", keep = 10 }");
    trainer->add_plugin("ema", ema.plugin);
    auto result = trainer->fit();
    std::vector<baton::EvalRecord> saved;
    for (const auto& e : result.evals)
      if (e.at.batch % 2 == 0) saved.push_back(e);
    auto expected = expected_best(saved, "eval/accuracy", /*maximize=*/true, 10);
    CHECK(expected.size() == 3);
    check_best_with_ema(dir, expected);
  }

  TEST_CASE("selection survives a resume: the same best checkpoints as an uninterrupted run") {
    auto dir = baton::test::scratch_dir("ema-select-resume");
    auto whole_trainer = make_trainer(selecting_options(dir / "whole"));
    auto whole_ema = load_ema(kSelectByLoss);
    whole_trainer->add_plugin("ema", whole_ema.plugin);
    auto whole = whole_trainer->fit();
    auto expected = expected_best(whole.evals, "eval/loss", false, 2);

    struct StopAt : baton::Callback {
      void batch_end(baton::State& s, baton::Logger&) override {
        if (s.timestamp().batch == 4) s.request_stop("pause");
      }
    };
    auto first = make_trainer(selecting_options(dir / "split"));
    auto first_ema = load_ema(kSelectByLoss);
    first->add_plugin("ema", first_ema.plugin);
    first->add_plugin("stop", std::make_shared<StopAt>());
    auto first_result = first->fit();
    CHECK(first_result.end.batch == 4);
    check_best_with_ema(dir / "split", expected_best(first_result.evals, "eval/loss", false, 2));

    auto resumed_options = selecting_options(dir / "split");
    resumed_options.resume = "auto";
    auto resumed = make_trainer(resumed_options);
    auto resumed_ema = load_ema(kSelectByLoss);
    resumed->add_plugin("ema", resumed_ema.plugin);
    resumed->fit();
    check_best_with_ema(dir / "split", expected);
    CHECK(read_bytes(dir / "split" / "best" / "ema.safetensors") == read_bytes(dir / "whole" / "best" / "ema.safetensors"));
  }

  TEST_CASE("resuming from an earlier checkpoint puts best/ back to that checkpoint's ranking") {
    auto dir = baton::test::scratch_dir("ema-select-rewind");
    auto options = selecting_options(dir);
    options.keep_last = 0;
    auto whole = make_trainer(options);
    auto whole_ema = load_ema(kSelectByLoss);
    whole->add_plugin("ema", whole_ema.plugin);
    auto result = whole->fit();
    auto final_best = expected_best(result.evals, "eval/loss", false, 2);

    struct BestAtStart : baton::Callback {
      std::set<std::string> folders;
      fs::path best;
      void fit_start(baton::State&, baton::Logger&) override { folders = folders_in(best); }
    };
    auto rewind_options = options;
    rewind_options.resume = (dir / "checkpoints" / "ba2").string();
    auto rewound = make_trainer(rewind_options);
    auto rewound_ema = load_ema(kSelectByLoss);
    auto probe = std::make_shared<BestAtStart>();
    probe->best = dir / "best";
    rewound->add_plugin("ema", rewound_ema.plugin);
    rewound->add_plugin("probe", probe);
    rewound->fit();
    std::vector<baton::EvalRecord> first_two(result.evals.begin(), result.evals.begin() + 2);
    std::set<std::string> at_ba2;
    for (const auto& e : expected_best(first_two, "eval/loss", false, 2)) at_ba2.insert(e.name);
    CHECK(probe->folders == at_ba2);
    check_best_with_ema(dir, final_best);  // the rerun, being exact, selects the same again
  }

  TEST_CASE("without mode selection ranks by the metric's own direction (accuracy: the max); mode overrides it") {
    struct Case {
      std::string metric;
      std::string mode;  // "": not given
      bool maximize;     // what the ranking must be
    };
    for (const Case& c : {Case{"eval/accuracy", "", true}, Case{"eval/accuracy", "min", false},
                          Case{"eval/loss", "", false}, Case{"eval/loss", "max", true}}) {
      CAPTURE(c.metric);
      CAPTURE(c.mode);
      auto dir = baton::test::scratch_dir("ema-select-direction-" + c.metric.substr(5) + "-" + c.mode);
      auto options = selecting_options(dir);  // an evaluation and a checkpoint at each of 6 batches
      options.keep_last = 0;
      auto trainer = make_trainer(options);
      auto ema = load_ema("smoothing = 0.5\nselect = { metric = \"" + c.metric + "\", keep = 1" +
                          (c.mode.empty() ? std::string() : ", mode = \"" + c.mode + "\"") + " }");
      trainer->add_plugin("ema", ema.plugin);
      auto result = trainer->fit();
      REQUIRE(result.evals.size() == 6);
      const auto best = expected_best(result.evals, c.metric, c.maximize, 1);
      // The run's best and worst differ, so the other direction would have kept another checkpoint.
      REQUIRE(best[0].value != expected_best(result.evals, c.metric, !c.maximize, 1)[0].value);
      check_best_with_ema(dir, best);
      CHECK(read_json(dir / "best" / "best.json")["mode"] == (c.maximize ? "max" : "min"));
    }
  }

  TEST_CASE("without mode, a metric of no known direction is refused before the run starts, at its key") {
    // ema/smoothing is logged (the plugin declares it), but no one says which way is better.
    const std::string what = refusal("ema-select-undirected", "{ metric = \"ema/smoothing\" }");
    CHECK(contains(what, "run.toml:3:"));
    CHECK(contains(what, "plugins.ema.select.metric: whether a higher or lower 'ema/smoothing' is better is not "
                         "known to the run"));
    CHECK(contains(what, "set mode = \"max\" or \"min\" beside it"));
  }

  TEST_CASE("a metric that no pass logs is refused before the run starts, at its key") {
    const std::string what = refusal("ema-select-unknown", "{ metric = \"eval/acc\", mode = \"max\" }");
    CHECK(contains(what, "run.toml:3:"));
    CHECK(contains(what, "plugins.ema.select.metric"));
    CHECK(contains(what, "this run logs no metric 'eval/acc' (did you mean 'eval/accuracy'?)"));
  }
}
