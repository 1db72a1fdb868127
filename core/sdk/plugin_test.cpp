#include "baton_test.h"  // first: it orders c10's and doctest's CHECK macros (the SDK includes ATen)

#include <map>
#include <optional>
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

  TEST_CASE("an algorithm subscribes one member function per event; the others keep Composer's match and apply") {
    struct Counting : baton::Algorithm {
      int ends = 0, starts = 0;
      void subscribe(baton::Subscriptions& events) override {
        events.on(baton::Event::batch_end, this, &Counting::on_end);
        events.on(baton::Event::fit_start, this, &Counting::on_start);
      }
      void on_end(baton::State&, baton::Logger&) { ++ends; }
      void on_start(baton::State&, baton::Logger&) { ++starts; }
    } counting;
    baton::Subscriptions events;
    counting.subscribe(events);
    REQUIRE(events.entries().size() == 2);
    CHECK(events.entries()[0].event == "batch_end");
    CHECK(events.entries()[1].event == "fit_start");
    CHECK_FALSE(events.entries()[0].match);  // always runs
    baton::State state;
    NullLogger logger;
    events.entries()[0].handler(state, logger);
    events.entries()[0].handler(state, logger);
    events.entries()[1].handler(state, logger);
    CHECK(counting.ends == 2);
    CHECK(counting.starts == 1);
    // Not overridden: Composer's pair runs nowhere.
    CHECK_FALSE(counting.match(baton::Event::batch_end, state));
  }

  TEST_CASE("Declarations keep each name once, in order; \"eval\" is every run's own pass") {
    baton::Declarations run("cuda:1", 4, "ema");
    CHECK(run.device() == "cuda:1");
    CHECK(run.world_size() == 4);
    CHECK(run.requested_weights() == "ema");
    run.metric("a/x");
    run.metric("b/y", true);
    run.metric("a/x", false);  // again, now with a direction
    run.weight_set("ema");
    run.weight_set("raw");
    run.weight_set("ema");
    run.eval_pass("eval");
    run.eval_pass("eval_raw");
    run.eval_pass("eval_raw");
    run.metric_family("l2/");
    run.watch(baton::WatchedMetric{"eval/loss", "plugins.p.monitor", {"run.toml", 2, 3}, std::nullopt});
    CHECK(run.metrics() == std::vector<std::string>{"a/x", "b/y"});
    CHECK(run.directions() == std::map<std::string, bool>{{"a/x", false}, {"b/y", true}});
    CHECK(run.weight_sets() == std::vector<std::string>{"ema", "raw"});
    CHECK(run.eval_passes() == std::vector<std::string>{"eval_raw"});
    CHECK(run.metric_families() == std::vector<std::string>{"l2/"});
    REQUIRE(run.watched().size() == 1);
    CHECK(run.watched()[0].where.line == 2);
  }

  TEST_CASE("RunFacts::maximizes: the mode, else the metric's direction, else one error at the key") {
    baton::RunFacts facts;
    facts.set_metrics({"eval/accuracy", "lr"}, {{"eval/accuracy", true}});
    const baton::SourceLocation where{"run.toml", 4, 9};
    CHECK(facts.maximizes({"eval/accuracy", "plugins.p.monitor", where, std::nullopt}));
    CHECK_FALSE(facts.maximizes({"eval/accuracy", "plugins.p.monitor", where, false}));  // mode = "min" wins
    CHECK(facts.maximizes({"lr", "plugins.p.monitor", where, true}));
    CHECK_THROWS_WITH_AS(facts.maximizes({"lr", "plugins.p.monitor", where, std::nullopt}),
                         doctest::Contains("run.toml:4:9: plugins.p.monitor: whether a higher or lower 'lr' is better "
                                           "is not known to the run"),
                         baton::ConfigError);
    CHECK(facts.eval_passes() == std::vector<std::string>{"eval"});  // a State no trainer runs has the main pass
    CHECK_FALSE(facts.can_probe());
    CHECK_THROWS_AS(facts.probe_forward(baton::Batch()), baton::Error);
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
