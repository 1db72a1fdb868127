// nan_monitor driven with losses the test sets. The whole run (exit status, the last checkpoint intact) is tested
// through the CLI in tests/cli_test.cpp.
#include "baton_test.h"

#include <cmath>
#include <limits>
#include <string>

#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>

#include "monitor_test_support.h"
#include "plugin_files.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace nan_monitor_test {

using namespace monitor_test;

namespace {

std::string error_for(baton::Callback& monitor, baton::State& state) {
  RecordingLogger logger;
  try {
    monitor.after_loss(state, logger);
  } catch (const baton::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("nan_monitor") {
  TEST_CASE("a finite loss passes; nan and inf fail naming the batch, counted from 1 as the run goes") {
    auto plugin = load_plugin(baton::test::plugin_file("nan_monitor"), "nan_monitor", "");
    REQUIRE(plugin.callback != nullptr);
    baton::State state;
    // after_loss of the run's 7th batch, the 3rd of its 2nd epoch: before batch_end the timestamp counts the
    // batches before this one.
    state.progress.now.epoch = 1;
    state.progress.now.batch = 6;
    state.progress.now.batch_in_epoch = 2;

    CHECK(error_for(*plugin.callback, state) == "");  // no loss on State: nothing to check
    state.loss = at::scalar_tensor(0.25);
    CHECK(error_for(*plugin.callback, state) == "");
    state.loss = at::scalar_tensor(std::numeric_limits<double>::quiet_NaN());
    CHECK(error_for(*plugin.callback, state) ==
          "nan_monitor: the training loss of batch 7 (epoch 2, batch 3 of the epoch) is nan; stopped before its "
          "backward pass and optimizer step, so the weights are those after batch 6");
    state.loss = at::scalar_tensor(-std::numeric_limits<double>::infinity());
    CHECK(contains(error_for(*plugin.callback, state), "batch 7 (epoch 2, batch 3 of the epoch) is -inf;"));
    state.loss = at::tensor({1.0, std::numeric_limits<double>::infinity()});
    CHECK(contains(error_for(*plugin.callback, state), "has non-finite elements"));
  }

  TEST_CASE("it has no keys") {
    CHECK(contains(config_error(baton::test::plugin_file("nan_monitor"), "nan_monitor", "check_grads = true"), "check_grads"));
  }
}

}  // namespace nan_monitor_test
