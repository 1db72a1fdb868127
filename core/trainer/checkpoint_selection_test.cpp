#include "baton_test.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/ops/full.h>

#include "baton/declarations.h"
#include "baton/trainer.h"
#include "error_text.h"
#include "best_folder.h"
#include "small_trainer.h"

namespace fs = std::filesystem;
using baton::Time;
using baton::TimeUnit;
using baton::test::check_best_folder;
using baton::test::contains;
using baton::test::expected_best;
using baton::test::folders_in;
using baton::test::make_trainer;
using baton::test::quiet_options;
using baton::test::read_json;
using Entry = baton::test::BestEntry;

namespace {

// An evaluation and a checkpoint at each of the small trainer's 6 batches (3 per epoch, 2 epochs).
baton::TrainerOptions selecting(const fs::path& dir, const std::string& metric, std::int64_t keep) {
  auto o = quiet_options(dir.string());
  o.eval_interval = Time(1, TimeUnit::batch);
  o.save_interval = Time(1, TimeUnit::batch);
  o.keep_last = 2;
  o.keep_best.metric = metric;
  o.keep_best.keep = keep;
  return o;
}

// Adds a file of its own to every checkpoint (its batch number, as a tensor) and names it for best/; optionally asks
// for a selection itself, as the EMA's `select` does.
struct FileWriter : baton::Callback {
  std::string metric;  // "": asks for no selection
  std::int64_t keep = 1;
  void declare(baton::Declarations& run) const override {
    run.best_file("writer.safetensors");
    if (!metric.empty()) run.keep_best(baton::WatchedMetric{metric, "plugins.writer.select.metric", {"run.toml", 7, 1}, {}}, keep);
  }
  void write(baton::State& state) {
    if (state.checkpoint == nullptr) return;
    baton::StateDict file;
    file.set_tensor("batch", at::full({1}, static_cast<double>(state.progress.now.batch)));
    state.checkpoint->add_tensors_file("writer.safetensors", file);
  }
  void batch_checkpoint(baton::State& state, baton::Logger&) override { write(state); }
  void epoch_checkpoint(baton::State& state, baton::Logger&) override { write(state); }
};

// What a checkpoint written before the selection was the trainer's holds: the EMA plugin's state with the ranking
// as "select/" scalars (written out here by hand).
struct LegacyEmaState : baton::Callback {
  void state_dict(baton::StateDict& out) const override {
    out.set_string("select/metric", "eval/loss");
    out.set_string("select/mode", "min");
    out.set_int("select/count", 1);
    out.set_string("select/0/name", "ep1");
    out.set_string("select/0/path", path);
    out.set_double("select/0/value", -1.0);  // below any loss: stays the best
    out.set_int("select/0/epoch", 0);
    out.set_int("select/0/batch", 3);
  }
  std::string path;
};

std::string refusal(const baton::TrainerOptions& options, std::shared_ptr<baton::Plugin> plugin = nullptr) {
  auto trainer = make_trainer(options);
  if (plugin) trainer->add_plugin("writer", plugin);
  return baton::test::refusal_before_training(*trainer);
}

}  // namespace

TEST_SUITE("trainer") {
  TEST_CASE("keep_best without any plugin: the best k checkpoints by the metric's own direction, kept past keep_last") {
    for (const auto& [metric, maximize] : std::vector<std::pair<std::string, bool>>{{"eval/loss", false},
                                                                                   {"eval/accuracy", true}}) {
      CAPTURE(metric);
      auto dir = baton::test::scratch_dir("selection-" + metric.substr(5));
      auto result = make_trainer(selecting(dir, metric, 2))->fit();
      REQUIRE(result.evals.size() == 6);
      const auto expected = expected_best(result.evals, metric, maximize, 2);
      // The other direction would have kept other checkpoints: the direction is what decided.
      REQUIRE(expected[0].value != expected_best(result.evals, metric, !maximize, 1)[0].value);
      check_best_folder(dir, expected);
      CHECK(read_json(dir / "best" / "best.json")["mode"] == (maximize ? "max" : "min"));
      CHECK(folders_in(dir / "checkpoints") == std::set<std::string>{"ba5", "ba6"});  // keep_last = 2
      CHECK_FALSE(fs::exists(dir / "best" / "ema.safetensors"));  // no plugin names a file
    }
  }

  TEST_CASE("keep_best: the files plugins name are best/'s copies of the top checkpoint's") {
    auto dir = baton::test::scratch_dir("selection-files");
    auto trainer = make_trainer(selecting(dir, "eval/loss", 3));
    trainer->add_plugin("writer", std::make_shared<FileWriter>());
    auto result = trainer->fit();
    const auto expected = expected_best(result.evals, "eval/loss", false, 3);
    check_best_folder(dir, expected, {"writer.safetensors"});
    auto top = baton::read_safetensors((dir / "best" / "writer.safetensors").string());
    CHECK(top.tensors.front().second.item<double>() == std::stod(expected[0].name.substr(2)));
  }

  TEST_CASE("keep_best: a plugin asking for the same selection is one selection; another is refused at its key") {
    auto dir = baton::test::scratch_dir("selection-requests");
    auto same = std::make_shared<FileWriter>();
    same->metric = "eval/loss";
    same->keep = 2;
    auto trainer = make_trainer(selecting(dir / "same", "eval/loss", 2));
    trainer->add_plugin("writer", same);
    auto result = trainer->fit();
    check_best_folder(dir / "same", expected_best(result.evals, "eval/loss", false, 2));

    auto other = std::make_shared<FileWriter>();
    other->metric = "eval/accuracy";
    other->keep = 2;
    const std::string what = refusal(selecting(dir / "other", "eval/loss", 2), other);
    CHECK(contains(what, "run.toml:7:1: plugins.writer.select.metric: asks for the best 2 by eval/accuracy (max)"));
    CHECK(contains(what, "checkpoint.keep_best.metric already selects the best 2 by eval/loss (min)"));
    CHECK_FALSE(fs::exists(dir / "other" / "best"));
  }

  TEST_CASE("keep_best: a metric the run never logs is refused before the run starts, at its key") {
    auto options = selecting(baton::test::scratch_dir("selection-unknown"), "eval/acc", 1);
    options.keep_best.where = {"run.toml", 12, 3};
    const std::string what = refusal(options);
    CHECK(contains(what, "run.toml:12:3: checkpoint.keep_best.metric: this run logs no metric 'eval/acc' (did you "
                         "mean 'eval/accuracy'?)"));
  }

  TEST_CASE("keep_best resumes a checkpoint that kept the ranking as the EMA plugin's select/ scalars") {
    auto dir = baton::test::scratch_dir("selection-legacy");
    auto first_options = quiet_options(dir.string());
    first_options.max_duration = Time(1, TimeUnit::epoch);
    auto legacy = std::make_shared<LegacyEmaState>();
    legacy->path = (dir / "checkpoints" / "ep1").string();
    auto first = make_trainer(first_options);
    first->add_plugin("ema", legacy);
    first->fit();
    REQUIRE(fs::exists(dir / "checkpoints" / "ep1" / "meta.json"));

    auto options = selecting(dir, "eval/loss", 2);
    options.keep_last = 0;
    options.resume = "auto";
    auto resumed = make_trainer(options);
    auto result = resumed->fit();
    // ep1 (value -1, from the old scalars) stays first; the best evaluation of the resumed part follows it.
    std::vector<baton::EvalRecord> after;
    for (const auto& e : result.evals)
      if (e.at.batch > 3) after.push_back(e);
    REQUIRE(after.size() == 3);
    const auto next = expected_best(after, "eval/loss", false, 1);
    check_best_folder(dir, {Entry{"ep1", -1.0}, next[0]});
    bool warned = false;
    for (const auto& w : resumed->warnings()) warned = warned || contains(w, "holds state of plugin 'ema'");
    CHECK(warned);
  }
}
