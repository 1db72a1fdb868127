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

  TEST_CASE("a Callback subscribes to the methods its class overrides once that class is recorded") {
    RecordingCallback cb;
    baton::State state;
    NullLogger logger;
    baton::Subscriptions untyped;
    cb.subscribe(untyped);  // its class not known yet: every event
    CHECK(untyped.entries().size() == baton::kEventCount);

    baton::detail::CallbackOverrides::record(cb);
    baton::Subscriptions typed;
    cb.subscribe(typed);
    REQUIRE(typed.entries().size() == 2);
    CHECK(typed.entries()[0].event == "fit_start");
    CHECK(typed.entries()[1].event == "batch_end");
    CHECK_FALSE(typed.entries()[0].match);
    for (const auto& entry : typed.entries()) entry.handler(state, logger);
    CHECK(cb.seen == std::vector<std::string>{"fit_start", "batch_end"});
  }

  TEST_CASE("record leaves a callback of a derived class subscribed to every event") {
    struct MoreRecording final : RecordingCallback {
      void epoch_end(baton::State&, baton::Logger&) override { seen.push_back("epoch_end"); }
    } more;
    // Recorded as a RecordingCallback, which it is not exactly: its own epoch_end must not be lost.
    baton::detail::CallbackOverrides::record(static_cast<RecordingCallback&>(more));
    baton::Subscriptions events;
    more.subscribe(events);
    CHECK(events.entries().size() == baton::kEventCount);
  }

  TEST_CASE("an Algorithm subscribes match and apply to every event, each with its own Event value") {
    struct Every final : baton::Algorithm {
      bool match(baton::Event e, const baton::State&) override { return e == baton::Event::batch_end; }
      void apply(baton::Event e, baton::State&, baton::Logger&) override { applied.emplace_back(baton::event_name(e)); }
      std::vector<std::string> applied;
    } every;
    baton::Subscriptions events;
    every.subscribe(events);
    REQUIRE(events.entries().size() == baton::kEventCount);
    baton::State state;
    NullLogger logger;
    for (std::size_t i = 0; i < baton::kEventCount; ++i) {
      const auto& entry = events.entries()[i];
      CHECK(entry.event == baton::event_name(baton::kAllEvents[i]));
      REQUIRE(entry.match);
      if (entry.match(state)) entry.handler(state, logger);
    }
    CHECK(every.applied == std::vector<std::string>{"batch_end"});
  }

  TEST_CASE("Subscriptions::on names an Event of this SDK; add takes any name, left to the engine to resolve") {
    baton::Subscriptions events;
    events.on(baton::Event::eval_end, [](baton::State&, baton::Logger&) {});
    events.add("not_an_event", [](baton::State&, baton::Logger&) {});
    REQUIRE(events.entries().size() == 2);
    CHECK(events.entries()[0].event == "eval_end");
    CHECK(events.entries()[1].event == "not_an_event");
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
