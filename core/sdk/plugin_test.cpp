#include "baton_test.h"  // first: it orders c10's and doctest's CHECK macros (the SDK includes ATen)

#include <string>
#include <vector>

#include "baton/plugin.h"

namespace {

struct RecordingCallback : baton::Callback {
  std::vector<std::string> seen;
  void fit_start(baton::State&, baton::Logger&) override { seen.push_back("fit_start"); }
  void batch_end(baton::State&, baton::Logger&) override { seen.push_back("batch_end"); }
};

struct NullLogger : baton::Logger {
  void log_metric(std::string_view, double) override {}
  void info(std::string_view) override {}
  void warn(std::string_view) override {}
};

}  // namespace

TEST_SUITE("sdk") {
  TEST_CASE("Callback::run_event calls the method named after the event and nothing else") {
    RecordingCallback cb;
    baton::State state;
    NullLogger logger;
    for (baton::Event e : baton::kAllEvents) cb.run_event(e, state, logger);
    CHECK(cb.seen == std::vector<std::string>{"fit_start", "batch_end"});
  }

  TEST_CASE("State::request_stop keeps the first reason") {
    baton::State state;
    CHECK_FALSE(state.stop_requested());
    state.request_stop("loss is NaN");
    state.request_stop("second");
    CHECK(state.stop_requested());
    CHECK(state.stop_reason() == "loss is NaN");
  }

  TEST_CASE("ConfigError names file, line, column and key") {
    baton::ConfigError e({"cfg.toml", 12, 3}, "trainer.max_duration", "expected a time string");
    CHECK(std::string(e.what()) == "cfg.toml:12:3: trainer.max_duration: expected a time string");
    baton::ConfigError no_line({"--set", 0, 0}, "run.seed", "expected an integer");
    CHECK(std::string(no_line.what()) == "--set: run.seed: expected an integer");
  }

  TEST_CASE("the plugin macro fills the info struct") {
    // Exercised for real by the loader tests with fixture plugins; here only the kind deduction.
    struct A : baton::Algorithm {
      bool match(baton::Event, const baton::State&) override { return false; }
      void apply(baton::Event, baton::State&, baton::Logger&) override {}
    };
    CHECK(baton::detail::plugin_kind<A>() == BATON_PLUGIN_ALGORITHM);
    CHECK(baton::detail::plugin_kind<RecordingCallback>() == BATON_PLUGIN_CALLBACK);
  }
}
