// loss_spike driven with losses the test sets, and in real runs: a spiked batch leaves the weights as they were.
#include "baton_test.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ops/scalar_tensor.h>

#include "algorithm_test_support.h"
#include "monitor_test_support.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace loss_spike_test {

using monitor_test::contains;
using monitor_test::RecordingLogger;

namespace {

// One batch's after_train_batch with `loss`: whether the step was skipped.
bool step(baton::Callback& plugin, baton::State& state, RecordingLogger& logger, double loss) {
  state.skip_step = false;
  state.loss = at::scalar_tensor(loss, at::kDouble);
  plugin.after_train_batch(state, logger);
  state.progress.now.batch += 1;
  return state.skip_step;
}

baton::LoadedPlugin spike_plugin(const std::string& toml) {
  return monitor_test::load_plugin(baton::test::plugin_file("loss_spike"), "loss_spike", toml);
}

}  // namespace

TEST_SUITE("loss_spike") {
  TEST_CASE("a loss over factor x the median of the window is skipped, logged, and kept out of the window") {
    auto plugin = spike_plugin("window = 4\nfactor = 3.0\n");
    REQUIRE(plugin.callback != nullptr);
    baton::State state;
    RecordingLogger logger(&state);
    // The window fills first: nothing is judged before 4 losses, however large.
    for (double loss : {1.0, 9.0, 0.9, 1.1}) CHECK_FALSE(step(*plugin.callback, state, logger, loss));
    // Median of {1.0, 9.0, 0.9, 1.1} = (1.0 + 1.1) / 2 = 1.05: up to 3.15 passes.
    CHECK_FALSE(step(*plugin.callback, state, logger, 3.15));  // window now {9.0, 0.9, 1.1, 3.15}: median 2.125
    CHECK_FALSE(step(*plugin.callback, state, logger, 1.0));   // {0.9, 1.1, 3.15, 1.0}: median 1.05
    CHECK(step(*plugin.callback, state, logger, 3.2));         // 3.2 > 3.15: a spike (batch 7)
    REQUIRE(logger.warnings.size() == 1);
    CHECK(logger.warnings[0] ==
          "loss_spike: the training loss of batch 7 is 3.2, over 3 x the median 1.05 of the last 4 batches: its "
          "optimizer step is skipped (1 so far)");
    CHECK(logger.last("loss_spike/skipped") == 1);
    // The spike stayed out: the median is still 1.05, so 3.15 passes and then 3.16 is judged against {1.1, 3.15,
    // 1.0, 3.15}, median 2.125.
    CHECK_FALSE(step(*plugin.callback, state, logger, 3.15));
    CHECK_FALSE(step(*plugin.callback, state, logger, 6.3));  // 6.3 <= 3 x 2.125 = 6.375
    // A non-finite loss is a spike too.
    CHECK(step(*plugin.callback, state, logger, std::numeric_limits<double>::quiet_NaN()));
    CHECK(logger.last("loss_spike/skipped") == 2);
    CHECK_FALSE(state.stop_requested());

    // A resumed run judges by the saved window.
    baton::StateDict saved;
    plugin.plugin->state_dict(saved);
    auto resumed = spike_plugin("window = 4\nfactor = 3.0\n");
    resumed.plugin->load_state_dict(saved);
    baton::State other;
    RecordingLogger other_logger(&other);
    // Window {3.15, 1.0, 3.15, 6.3}: median 3.15, so 9.45 passes and 9.5 is a spike, in both.
    CHECK(step(*resumed.callback, other, other_logger, 9.5) == step(*plugin.callback, state, logger, 9.5));
    CHECK(other.skip_step);
    CHECK(other_logger.last("loss_spike/skipped") == 3);
  }

  TEST_CASE("max_skips spikes in a row stop the run; action = \"stop\" stops at the first") {
    auto plugin = spike_plugin("window = 2\nmax_skips = 2\n");
    baton::State state;
    RecordingLogger logger(&state);
    step(*plugin.callback, state, logger, 1.0);
    step(*plugin.callback, state, logger, 1.0);
    CHECK(step(*plugin.callback, state, logger, 10.0));
    CHECK_FALSE(state.stop_requested());
    CHECK_FALSE(step(*plugin.callback, state, logger, 1.0));  // a normal loss between resets the count
    CHECK(step(*plugin.callback, state, logger, 10.0));
    CHECK_FALSE(state.stop_requested());
    CHECK(step(*plugin.callback, state, logger, 10.0));
    REQUIRE(state.stop_requested());
    CHECK(contains(state.stop_reason(), "2 spikes in a row (max_skips)"));

    auto stopper = spike_plugin("window = 2\naction = \"stop\"\n");
    baton::State s2;
    RecordingLogger l2(&s2);
    step(*stopper.callback, s2, l2, 1.0);
    step(*stopper.callback, s2, l2, 1.0);
    CHECK(step(*stopper.callback, s2, l2, 10.0));
    CHECK(contains(s2.stop_reason(), "(action = \"stop\")"));
  }

  TEST_CASE("its keys are checked") {
    const std::string file = baton::test::plugin_file("loss_spike");
    CHECK(contains(monitor_test::config_error(file, "loss_spike", "window = 1"), "window"));
    CHECK(contains(monitor_test::config_error(file, "loss_spike", "factor = 1.0"), "expected a number > 1"));
    CHECK(contains(monitor_test::config_error(file, "loss_spike", "action = \"undo\""),
                   "\"skip\", \"stop\", \"rollback\""));
    CHECK(contains(monitor_test::config_error(file, "loss_spike", "median = 3"), "median"));
  }

  // Multiplies the loss of one batch (its backward too), as a bad batch would.
  struct Spiker : baton::Callback {
    std::int64_t at_batch;
    explicit Spiker(std::int64_t b) : at_batch(b) {}
    void after_loss(baton::State& s, baton::Logger&) override {
      if (s.timestamp().batch == at_batch) s.loss = s.loss * 1000.0;
    }
  };
  // The model's weights after each batch.
  struct WeightsAfter : baton::Callback {
    std::vector<baton::test::Weights> after;
    void batch_end(baton::State& s, baton::Logger&) override { after.push_back(baton::test::copy_state(*s.facts.model())); }
  };

  TEST_CASE("in a run, the spiked batch's step is left out: the weights after it are those before it") {
    const auto run = [](bool with_plugin) {
      auto trainer = algorithm_test::make_trainer(algorithm_test::quiet_options(), "mlp");
      trainer->add_plugin("spiker", std::make_shared<Spiker>(4));  // the 5th batch
      if (with_plugin) trainer->add_plugin("loss_spike", spike_plugin("window = 3\n").plugin);
      auto weights = std::make_shared<WeightsAfter>();
      trainer->add_plugin("weights", weights);
      const auto result = trainer->fit();
      REQUIRE(weights->after.size() == 6);
      return std::make_pair(weights->after, result);
    };
    const auto [guarded, guarded_result] = run(true);
    CHECK(baton::test::bitwise_equal(guarded[4], guarded[3]));       // batch 5 changed nothing
    CHECK_FALSE(baton::test::bitwise_equal(guarded[5], guarded[4]));  // batch 6 trained again
    CHECK_FALSE(baton::test::bitwise_equal(guarded[3], guarded[2]));
    const auto [plain, plain_result] = run(false);
    CHECK(baton::test::bitwise_equal(plain[3], guarded[3]));          // the same run up to the spike
    CHECK_FALSE(baton::test::bitwise_equal(plain[4], plain[3]));      // without the plugin the spike is a step
    // ... which the guarded run's evaluation does not suffer.
    CHECK(guarded_result.evals.back().metrics.at("eval/loss") < plain_result.evals.back().metrics.at("eval/loss"));
  }

  // The inputs of each batch trained, summed (which data a batch drew), and the weights it started from (a rollback
  // acts after batch_end).
  struct InputsSeen : baton::Callback {
    std::vector<double> sums;
    std::vector<baton::test::Weights> before;
    void after_dataloader(baton::State& s, baton::Logger&) override { sums.push_back(s.batch.inputs().sum().item<double>()); }
    void batch_start(baton::State& s, baton::Logger&) override { before.push_back(baton::test::copy_state(*s.facts.model())); }
  };

  TEST_CASE("action = \"rollback\": back to the last checkpoint's weights, and the batches since it are skipped") {
    // 3 batches per epoch, 2 epochs; a checkpoint at each epoch's end (ep1 = batch 3); the 5th batch spikes.
    const auto run = [](const std::string& action, const std::string& run_dir) {
      auto options = algorithm_test::quiet_options();
      options.run_dir = run_dir;
      auto trainer = algorithm_test::make_trainer(options, "mlp");
      trainer->add_plugin("spiker", std::make_shared<Spiker>(4));
      trainer->add_plugin("loss_spike", spike_plugin("window = 3\naction = \"" + action + "\"\n").plugin);
      auto weights = std::make_shared<WeightsAfter>();
      auto inputs = std::make_shared<InputsSeen>();
      trainer->add_plugin("weights", weights);
      trainer->add_plugin("inputs", inputs);
      const auto result = trainer->fit();
      REQUIRE(weights->after.size() == 6);
      std::string warnings;
      for (const auto& w : trainer->warnings()) warnings += w + "\n";
      REQUIRE(inputs->before.size() == 6);
      return std::make_tuple(weights->after, inputs, result, warnings);
    };
    const auto dir = baton::test::scratch_dir("loss-spike-rollback");
    const auto [rolled, rolled_inputs, rolled_result, rolled_warnings] = run("rollback", (dir / "rollback").string());
    const auto [skipped, skipped_inputs, skipped_result, skipped_warnings] = run("skip", (dir / "skip").string());
    // The 6th batch starts from the checkpoint's weights, those after the 3rd: the 4th batch's step is undone too.
    CHECK(baton::test::bitwise_equal(rolled_inputs->before[5], rolled[2]));
    CHECK_FALSE(baton::test::bitwise_equal(rolled_inputs->before[5], rolled[3]));
    CHECK(baton::test::bitwise_equal(rolled[3], skipped[3]));  // the same run until the spike
    CHECK(baton::test::bitwise_equal(rolled[4], rolled[3]));    // the spike's own step is skipped first
    CHECK(baton::test::bitwise_equal(skipped_inputs->before[5], skipped[3]));  // a skip keeps the 4th batch's step
    CHECK_FALSE(baton::test::bitwise_equal(rolled[5], rolled_inputs->before[5]));  // the 6th batch trains on
    // Time and data went on: six batches, each drawing what the run without a rollback drew.
    CHECK(rolled_result.end.batch == 6);
    CHECK(rolled_inputs->sums == skipped_inputs->sums);
    CHECK(contains(rolled_warnings, "loss_spike: the training loss of batch 5 is "));
    CHECK(contains(rolled_warnings, "(action = \"rollback\"): rolled back to " + (dir / "rollback" / "checkpoints" / "ep1").string()));
    CHECK(contains(rolled_warnings, "the 2 batches since it, to "));
    CHECK_FALSE(contains(skipped_warnings, "rolled back"));

    // Without a checkpoint to go back to, the spike's step is skipped and the trainer says why nothing more is done.
    const auto [plain, plain_inputs, plain_result, plain_warnings] = run("rollback", "");
    CHECK(baton::test::bitwise_equal(plain[4], plain[3]));
    CHECK(contains(plain_warnings, "no checkpoint has been saved yet, so nothing is rolled back"));
  }
}

}  // namespace loss_spike_test
