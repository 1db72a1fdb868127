#include "baton_test.h"  // first: it orders c10's and doctest's CHECK macros (the SDK includes ATen)

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"

using baton::Event;

namespace {

struct NullLogger : baton::Logger {
  void log_metric(std::string_view, double) override {}
  void info(std::string_view) override {}
  void warn(std::string_view) override {}
};

// Records "<name>:<event>" into a shared journal; matches every event unless `only` is set.
struct JournalAlgorithm : baton::Algorithm {
  JournalAlgorithm(std::string name, std::vector<std::string>& journal, std::optional<Event> only = {})
      : name(std::move(name)), journal(journal), only(only) {}
  bool match(Event e, const baton::State&) override { return !only || *only == e; }
  void apply(Event e, baton::State&, baton::Logger&) override {
    journal.push_back(name + ":" + std::string(baton::event_name(e)));
  }
  std::string name;
  std::vector<std::string>& journal;
  std::optional<Event> only;
};

struct JournalCallback : baton::Callback {
  JournalCallback(std::string name, std::vector<std::string>& journal) : name(std::move(name)), journal(journal) {}
  void init(baton::State&, baton::Logger&) override { journal.push_back(name + ":init"); }
  void batch_end(baton::State&, baton::Logger&) override { journal.push_back(name + ":batch_end"); }
  void after_forward(baton::State&, baton::Logger&) override { journal.push_back(name + ":after_forward"); }
  void close() override { journal.push_back(name + ":close"); }
  std::string name;
  std::vector<std::string>& journal;
};

struct Throwing : baton::Algorithm {
  bool match(Event e, const baton::State&) override { return e == Event::batch_end; }
  void apply(Event, baton::State&, baton::Logger&) override { throw std::runtime_error("boom"); }
  void close() override { throw std::runtime_error("close failed"); }
};

struct Fixture {
  baton::State state;
  NullLogger logger;
  baton::Engine engine{state, logger};
  std::vector<std::string> journal;
  std::vector<std::unique_ptr<baton::Plugin>> owned;

  void algorithm(const std::string& name, std::optional<Event> only = {}) {
    auto* a = new JournalAlgorithm(name, journal, only);
    owned.emplace_back(a);
    engine.add({name, a, nullptr});
  }
  // As BATON_PLUGIN's factory and Trainer::add_plugin do: the class is known, so it subscribes to its overrides.
  void callback(const std::string& name) {
    auto* c = new JournalCallback(name, journal);
    baton::detail::CallbackOverrides::record(*c);
    owned.emplace_back(c);
    engine.add({name, nullptr, c});
  }
};

// Registers handlers of its own: two on batch_end (in this order), one on fit_start by name, one matched.
struct Registering : baton::Callback {
  explicit Registering(std::vector<std::string>& journal) : journal(journal) {}
  void subscribe(baton::Subscriptions& events) override {
    events.on(Event::batch_end, [this](baton::State&, baton::Logger&) { journal.push_back("first:batch_end"); });
    events.on(Event::batch_end, [this](baton::State&, baton::Logger&) { journal.push_back("second:batch_end"); });
    events.add("fit_start", [this](baton::State&, baton::Logger&) { journal.push_back("by_name:fit_start"); });
    events.on_match(
        Event::epoch_end, [](const baton::State& state) { return state.timestamp().epoch == 2; },
        [this](baton::State&, baton::Logger&) { journal.push_back("matched:epoch_end"); });
  }
  std::vector<std::string>& journal;
};

// Acts on two events only; counts what match() is asked.
struct Narrow : baton::Algorithm {
  void subscribe(baton::Subscriptions& events) override { subscribe_to(events, {Event::batch_start, Event::fit_end}); }
  bool match(Event e, const baton::State&) override {
    asked.emplace_back(baton::event_name(e));
    return e == Event::fit_end;
  }
  void apply(Event e, baton::State&, baton::Logger&) override { applied.emplace_back(baton::event_name(e)); }
  std::vector<std::string> asked, applied;
};

}  // namespace

TEST_SUITE("engine") {
  TEST_CASE("algorithms run in configured order, then callbacks") {
    Fixture f;
    f.algorithm("a1");
    f.callback("c1");
    f.algorithm("a2");
    f.callback("c2");
    f.engine.fire(Event::batch_end);
    CHECK(f.journal == std::vector<std::string>{"a1:batch_end", "a2:batch_end", "c1:batch_end", "c2:batch_end"});
  }

  TEST_CASE("after_* events reverse the algorithms, not the callbacks") {
    Fixture f;
    f.algorithm("a1");
    f.algorithm("a2");
    f.algorithm("a3");
    f.callback("c1");
    f.callback("c2");
    f.engine.fire(Event::after_forward);
    CHECK(f.journal == std::vector<std::string>{"a3:after_forward", "a2:after_forward", "a1:after_forward",
                                                "c1:after_forward", "c2:after_forward"});
  }

  TEST_CASE("init runs callbacks before algorithms") {
    Fixture f;
    f.algorithm("a1");
    f.callback("c1");
    f.engine.fire(Event::init);
    CHECK(f.journal == std::vector<std::string>{"c1:init", "a1:init"});
  }

  TEST_CASE("match filters algorithms") {
    Fixture f;
    f.algorithm("only_fit_start", Event::fit_start);
    f.algorithm("all");
    f.engine.fire(Event::batch_end);
    f.engine.fire(Event::fit_start);
    CHECK(f.journal == std::vector<std::string>{"all:batch_end", "only_fit_start:fit_start", "all:fit_start"});
  }

  TEST_CASE("every call that runs is traced as <plugin>/<event>, and only those") {
    Fixture f;
    f.algorithm("ema", Event::batch_end);
    f.callback("printer");
    std::vector<std::string> trace;
    f.engine.set_trace([&](const std::string& line) { trace.push_back(line); });
    f.engine.fire(Event::batch_end);
    f.engine.fire(Event::fit_start);  // ema does not match it, printer does not override it
    CHECK(trace == std::vector<std::string>{"ema/batch_end", "printer/batch_end"});
  }

  TEST_CASE("an internal entry runs in order but is not traced, and its error reaches the caller as it is") {
    struct Failing : baton::Callback {
      void batch_end(baton::State&, baton::Logger&) override { throw baton::Error("metrics file 'm': write failed"); }
    };
    Fixture f;
    auto* log = new JournalCallback("log", f.journal);
    f.owned.emplace_back(log);
    baton::detail::CallbackOverrides::record(*log);
    f.engine.add(baton::EngineEntry{"log", nullptr, log, /*internal=*/true});
    f.callback("printer");
    std::vector<std::string> trace;
    f.engine.set_trace([&](const std::string& line) { trace.push_back(line); });
    f.engine.fire(Event::batch_end);
    CHECK(f.journal == std::vector<std::string>{"log:batch_end", "printer:batch_end"});
    CHECK(trace == std::vector<std::string>{"printer/batch_end"});

    Fixture g;
    auto* failing = new Failing;
    g.owned.emplace_back(failing);
    baton::detail::CallbackOverrides::record(*failing);
    g.engine.add(baton::EngineEntry{"failing", nullptr, failing, /*internal=*/true});
    try {
      g.engine.fire(Event::batch_end);
      FAIL("the internal entry's error did not propagate");
    } catch (const baton::PluginError&) {
      FAIL("an internal entry's error was wrapped as a plugin's");
    } catch (const baton::Error& e) {
      CHECK(std::string(e.what()) == "metrics file 'm': write failed");
    }
  }

  TEST_CASE("a callback of a known class gets the events it overrides; through a base pointer, every event") {
    Fixture f;
    f.callback("typed");
    auto* erased = new JournalCallback("erased", f.journal);  // never recorded: its class is not known
    f.owned.emplace_back(erased);
    f.engine.add({"erased", nullptr, erased});
    std::vector<std::string> trace;
    f.engine.set_trace([&](const std::string& line) { trace.push_back(line); });
    for (Event e : baton::kAllEvents) f.engine.fire(e);
    const auto calls_of = [&](const std::string& id) {
      return std::count_if(trace.begin(), trace.end(), [&](const std::string& l) { return l.rfind(id + "/", 0) == 0; });
    };
    CHECK(std::count(trace.begin(), trace.end(), "typed/batch_end") == 1);
    CHECK(calls_of("typed") == 3);
    CHECK(calls_of("erased") == static_cast<std::ptrdiff_t>(baton::kEventCount));
    // Both saw the same calls of their overrides: the extra subscriptions of the erased one reach empty defaults.
    CHECK(f.journal == std::vector<std::string>{"typed:init", "erased:init", "typed:after_forward",
                                                "erased:after_forward", "typed:batch_end", "erased:batch_end"});
  }

  TEST_CASE("the override mask names exactly the overridden methods, inherited overrides included") {
    struct Base : baton::Callback {
      void fit_start(baton::State&, baton::Logger&) override {}
    };
    struct Derived final : Base {
      void batch_end(baton::State&, baton::Logger&) override {}

     private:
      void fit_end(baton::State&, baton::Logger&) override {}  // private: still an override
    };
    auto bit = [](Event e) { return std::uint64_t{1} << static_cast<unsigned>(e); };
    CHECK(baton::detail::CallbackOverrides::of<Derived>() ==
          (bit(Event::fit_start) | bit(Event::batch_end) | bit(Event::fit_end)));
    CHECK(baton::detail::CallbackOverrides::of<baton::Callback>() == 0);
  }

  TEST_CASE("handlers a plugin registers itself run in the order registered; a matched one when it matches") {
    Fixture f;
    auto* r = new Registering(f.journal);
    f.owned.emplace_back(r);
    f.engine.add({"registering", nullptr, r});
    f.engine.fire(Event::batch_end);
    f.engine.fire(Event::fit_start);
    f.engine.fire(Event::epoch_end);  // epoch 0: does not match
    f.state.progress.now.epoch = 2;
    f.engine.fire(Event::epoch_end);
    CHECK(f.journal == std::vector<std::string>{"first:batch_end", "second:batch_end", "by_name:fit_start",
                                                "matched:epoch_end"});
  }

  TEST_CASE("an algorithm narrowed with subscribe_to is asked about its events only, with their own values") {
    Fixture f;
    Narrow n;
    f.engine.add({"narrow", &n, nullptr});
    std::vector<std::string> trace;
    f.engine.set_trace([&](const std::string& line) { trace.push_back(line); });
    for (Event e : baton::kAllEvents) f.engine.fire(e);
    CHECK(n.asked == std::vector<std::string>{"batch_start", "fit_end"});
    CHECK(n.applied == std::vector<std::string>{"fit_end"});
    CHECK(trace == std::vector<std::string>{"narrow/fit_end"});
  }

  TEST_CASE("a subscription to an event this build does not have names the plugin and the event") {
    struct FromTheFuture : baton::Callback {
      void subscribe(baton::Subscriptions& events) override {
        events.add("batch_middle", [](baton::State&, baton::Logger&) {});
      }
    } future;
    Fixture f;
    try {
      f.engine.add({"future", nullptr, &future});
      FAIL("an unknown event was accepted");
    } catch (const baton::PluginError& e) {
      CHECK(std::string(e.what()) == "plugin 'future' subscribes to event 'batch_middle', which this baton does not "
                                     "have (was it built against a newer baton SDK?)");
    }
    CHECK(f.engine.entries().empty());  // nothing of it was kept
  }

  TEST_CASE("an exception from subscribe names the plugin") {
    struct Refusing : baton::Callback {
      void subscribe(baton::Subscriptions&) override { throw std::runtime_error("no events for me"); }
    } refusing;
    Fixture f;
    try {
      f.engine.add({"refusing", nullptr, &refusing});
      FAIL("expected a PluginError");
    } catch (const baton::PluginError& e) {
      CHECK(std::string(e.what()) == "plugin 'refusing' failed to subscribe: no events for me");
    }
  }

  TEST_CASE("close drops the handlers, so nothing of a plugin's library is kept past it") {
    auto captured = std::make_shared<int>(0);
    struct Holding : baton::Callback {
      explicit Holding(std::shared_ptr<int> held) : held(std::move(held)) {}
      void subscribe(baton::Subscriptions& events) override {
        events.on(Event::batch_end, [held = held](baton::State&, baton::Logger&) { ++*held; });
      }
      std::shared_ptr<int> held;
    };
    Fixture f;
    {
      Holding holding(captured);
      f.engine.add({"holding", nullptr, &holding});
      f.engine.fire(Event::batch_end);
      CHECK(*captured == 1);
      CHECK(captured.use_count() == 3);  // here, the plugin, the engine's handler
      f.engine.close();
      CHECK(captured.use_count() == 2);
    }
  }

  TEST_CASE("a plugin's exception names the plugin and the event") {
    Fixture f;
    Throwing t;
    f.engine.add({"thrower", &t, nullptr});
    f.engine.fire(Event::fit_start);  // does not match
    try {
      f.engine.fire(Event::batch_end);
      FAIL("expected a PluginError");
    } catch (const baton::PluginError& e) {
      CHECK(std::string(e.what()) == "plugin 'thrower' failed on event batch_end: boom");
    }
  }

  TEST_CASE("close closes every plugin even when one fails, and later events throw") {
    Fixture f;
    Throwing t;
    f.engine.add({"thrower", &t, nullptr});
    f.callback("c1");
    auto errors = f.engine.close();
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] == "plugin 'thrower' failed to close: close failed");
    CHECK(f.journal == std::vector<std::string>{"c1:close"});
    CHECK(f.engine.close().empty());  // idempotent, nothing closed twice
    CHECK(f.journal.size() == 1);
    CHECK_THROWS_AS(f.engine.fire(Event::batch_end), baton::Error);
  }

  TEST_CASE("trainer.cuda_graphs splits an event between the capturable plugins and the others") {
    Fixture f;
    f.algorithm("averager", Event::batch_end);  // matched: subscribed to every event
    f.callback("log");                          // batch_end and after_forward
    f.engine.set_capturable("averager");
    f.engine.fire(Event::batch_end, baton::EngineSide::capturable);
    CHECK(f.journal == std::vector<std::string>{"averager:batch_end"});
    f.journal.clear();
    f.engine.fire(Event::batch_end, baton::EngineSide::uncapturable);
    CHECK(f.journal == std::vector<std::string>{"log:batch_end"});
    f.journal.clear();
    f.engine.fire(Event::batch_end);
    CHECK(f.journal == std::vector<std::string>{"averager:batch_end", "log:batch_end"});
    // What a recorded step would hold but cannot: the callback's after_forward. The capturable plugin is not named.
    CHECK(f.engine.uncapturable_handlers({Event::before_forward, Event::after_forward}) ==
          std::vector<std::string>{"log/after_forward"});
    CHECK(f.engine.uncapturable_handlers({Event::before_forward}).empty());
  }

  TEST_CASE("an entry must be exactly one kind") {
    Fixture f;
    CHECK_THROWS_AS(f.engine.add({"nothing", nullptr, nullptr}), baton::PluginError);
  }
}
