#include "baton_test.h"  // first: it orders c10's and doctest's CHECK macros (the SDK includes ATen)

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
  void callback(const std::string& name) {
    auto* c = new JournalCallback(name, journal);
    owned.emplace_back(c);
    engine.add({name, nullptr, c});
  }
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

  TEST_CASE("every call is traced as <plugin>/<event>") {
    Fixture f;
    f.algorithm("ema", Event::batch_end);
    f.callback("printer");
    std::vector<std::string> trace;
    f.engine.set_trace([&](const std::string& line) { trace.push_back(line); });
    f.engine.fire(Event::batch_end);
    f.engine.fire(Event::fit_start);
    CHECK(trace == std::vector<std::string>{"ema/batch_end", "printer/batch_end", "printer/fit_start"});
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

  TEST_CASE("an entry must be exactly one kind") {
    Fixture f;
    CHECK_THROWS_AS(f.engine.add({"nothing", nullptr, nullptr}), baton::PluginError);
  }
}
