// profiler in a real run (the trace's events, plugin handlers and operators, only of the recorded batches) and driven
// directly (its table, with times the test makes by sleeping).
#include "baton_test.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/record_function.h>
#include <nlohmann/json.hpp>

#include "algorithm_test_support.h"
#include "monitor_test_support.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace profiler_test {

using monitor_test::contains;
using monitor_test::RecordingLogger;

namespace {

namespace fs = std::filesystem;

baton::LoadedPlugin profiler_plugin(const std::string& toml) {
  return monitor_test::load_plugin(baton::test::plugin_file("profiler"), "profiler", toml);
}

// Sleeps in its batch_end handler: a plugin whose time the profiler must find.
struct Sleeper : baton::Callback {
  std::chrono::milliseconds nap;
  explicit Sleeper(int ms) : nap(ms) {}
  void batch_end(baton::State&, baton::Logger&) override { std::this_thread::sleep_for(nap); }
};

nlohmann::json read_trace(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::vector<nlohmann::json> named(const nlohmann::json& trace, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& e : trace["traceEvents"])
    if (e["name"] == name) out.push_back(e);
  return out;
}

// The mean (the last figure, "… ms") of the table line naming `row`; -1 when there is none.
double mean_ms(const std::vector<std::string>& lines, const std::string& row) {
  for (const auto& line : lines)
    if (line.rfind("  " + row + "  ", 0) == 0) {
      const auto end = line.rfind(" ms");
      const auto begin = line.rfind(' ', end - 1);
      return std::stod(line.substr(begin + 1, end - begin - 1));
    }
  return -1;
}

}  // namespace

TEST_SUITE("profiler") {
  TEST_CASE("a run's trace holds the recorded batches' events, each plugin's handlers and LibTorch's operators") {
    for (const bool operators : {true, false}) {
      CAPTURE(operators);
      const auto dir = baton::test::scratch_dir(std::string("profiler-run-") + (operators ? "ops" : "events"));
      auto options = algorithm_test::quiet_options(dir.string());  // 3 batches per epoch, 2 epochs
      auto trainer = algorithm_test::make_trainer(options, "mlp");
      trainer->add_plugin("sleeper", std::make_shared<Sleeper>(20));
      trainer->add_plugin("profiler",
                          profiler_plugin(std::string("wait = 1\nactive = 2\noperators = ") + (operators ? "true" : "false")).plugin);
      trainer->fit();
      const auto trace = read_trace(dir / "profiler" / "trace_rank0.json");
      // Batches 2 and 3 were recorded: two batch_end events, each with the sleeper's 20 ms in it.
      CHECK(named(trace, "event/batch_end").size() == 2);
      const auto naps = named(trace, "plugin/sleeper/batch_end");
      REQUIRE(naps.size() == 2);
      for (const auto& nap : naps) {
        CHECK(nap["dur"].get<double>() >= 20000.0);
        CHECK(nap["cat"] == "baton");
        CHECK(nap["ph"] == "X");
      }
      // The epoch's end after batch 3 is in the recording (it runs before batch 4's data); the run's end is not.
      CHECK(named(trace, "event/epoch_end").size() == 1);
      CHECK(named(trace, "event/fit_end").empty());
      std::size_t ops = 0, autograd = 0, matmuls = 0;
      for (const auto& e : trace["traceEvents"]) {
        CHECK(e["ts"].get<double>() >= 0);
        if (e["cat"] == "operator") ++ops;
        if (e["cat"] == "autograd") ++autograd;
        if (e["name"] == "aten::addmm" || e["name"] == "aten::mm" || e["name"] == "aten::linear") ++matmuls;
      }
      if (operators) {
        CHECK(matmuls > 0);  // the mlp's layers, forward and evaluation
        CHECK(autograd > 0);  // its backward
      } else {
        CHECK(ops == 0);
        CHECK(autograd == 0);
      }
    }
  }

  TEST_CASE("its table: the time per event and per plugin handler, and the operators by time") {
    auto plugin = profiler_plugin("wait = 2\nactive = 1\ntop = 3\n");
    baton::State state;
    RecordingLogger logger(&state);
    plugin.callback->fit_start(state, logger);
    CHECK(contains(logger.lines.back(), "profiler: recording batches 3 to 3"));
    for (std::int64_t batch = 0; batch <= 3; ++batch) {
      state.progress.now.batch = batch;
      plugin.callback->before_dataloader(state, logger);
      // What the engine marks around an event and a handler, and an operator: only batch 2's are recorded.
      RECORD_USER_SCOPE("event/batch_end");
      {
        RECORD_USER_SCOPE("plugin/slow/batch_end");
        std::this_thread::sleep_for(std::chrono::milliseconds(batch == 2 ? 30 : 5));
      }
      at::matmul(at::ones({8, 8}), at::ones({8, 8}));
    }
    CHECK(mean_ms(logger.lines, "batch_end") >= 30.0);
    CHECK(mean_ms(logger.lines, "slow/batch_end") >= 30.0);
    CHECK(mean_ms(logger.lines, "slow/batch_end") < 1000.0);
    CHECK(mean_ms(logger.lines, "aten::matmul") >= 0.0);  // listed among the operators
    bool titled = false;
    for (const auto& line : logger.lines) titled = titled || contains(line, "time in each plugin's handlers over 1 batches");
    CHECK(titled);
    plugin.plugin->close();
  }

  TEST_CASE("its keys are checked") {
    const std::string file = baton::test::plugin_file("profiler");
    CHECK(contains(monitor_test::config_error(file, "profiler", "active = 0"), "active"));
    CHECK(contains(monitor_test::config_error(file, "profiler", "wait = -1"), "wait"));
    CHECK(contains(monitor_test::config_error(file, "profiler", "operators = 1"), "operators"));
    CHECK(contains(monitor_test::config_error(file, "profiler", "schedule = 3"), "schedule"));
  }
}

}  // namespace profiler_test
