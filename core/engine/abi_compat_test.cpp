// ABI 4's promise: a plugin built against this SDK keeps working with a later baton whose events.def gained events
// (anywhere in the list) and whose State gained members (at its end).
//
// This test program is that later baton. It is compiled with BATON_ABI_TEST_EXTRA_EVENT, which inserts the event
// abi_test_inserted after fit_start (so every later event's number is one more than the plugins think), and
// BATON_ABI_TEST_EXTRA_STATE_MEMBER, which appends State::abi_test_appended, together with the engine and the
// SDK's own sources (core/sdk/plugin.cpp: Callback's vtable and defaults, Subscriptions, State::request_stop). It
// exports those (ENABLE_EXPORTS), so the plugins it loads bind to them rather than to libbaton's, as they would to
// a later libbaton. The plugins, fixture_abi_callback and fixture_abi_algorithm, are built normally, without
// either define, and are loaded unchanged through the ordinary loader.
#include "baton_test.h"  // first: it orders c10's and doctest's CHECK macros (the SDK includes ATen)

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "baton/plugin_loader.h"
#include "engine/engine.h"

#if !defined(BATON_ABI_TEST_EXTRA_EVENT) || !defined(BATON_ABI_TEST_EXTRA_STATE_MEMBER)
#error "abi_compat_test.cpp plays a later baton: build it with both BATON_ABI_TEST_EXTRA_* defines"
#endif

using baton::Event;

namespace {

struct Lines final : baton::Logger {
  std::vector<std::string> lines;
  void log_metric(std::string_view, double) override {}
  void info(std::string_view message) override { lines.emplace_back(message); }
  void warn(std::string_view message) override { lines.emplace_back(message); }
};

std::string fixture(const std::string& name) {
  return (std::filesystem::path(BATON_TEST_PLUGIN_DIR) / (name + ".so")).string();
}

// A State whose members a plugin can only report right if it reads them where they are.
void fill(baton::State& state) {
  state.progress.now.epoch = 2;
  state.facts.set_ranks(3, 4);
  state.facts.set_seed(99);
  state.eval_set = "holdout";
  state.eval_label = "eval_raw";
  state.facts.set_run_dir("runs/abi");
  state.abi_test_appended = "set by the test";
}

// Loads the fixture, adds it to an engine and fires every event of this build in order, each with the timestamp's
// batch set to that event's number here: a plugin reporting "batch 18" from batch_end ran when this build fired its
// batch_end (18 here, 17 in the plugin's list).
struct Run {
  explicit Run(const std::string& name) : loaded(baton::PluginLoader().load(fixture(name), baton::PluginConfig())) {
    fill(state);
    engine.set_trace([this](const std::string& line) { trace.push_back(line); });
    engine.add(baton::EngineEntry{loaded.id, loaded.algorithm, loaded.callback});
    for (Event e : baton::kAllEvents) {
      state.progress.now.batch = static_cast<int>(e);
      engine.fire(e);
    }
    CHECK(engine.close().empty());
  }
  baton::LoadedPlugin loaded;  // first: the plugin (and its library) outlives the engine, which holds its code
  baton::State state;
  Lines logger;
  baton::Engine engine{state, logger};
  std::vector<std::string> trace;
};

std::string report(const std::string& event, int batch) {
  return event + ": batch " + std::to_string(batch) +
         ", epoch 2, rank 3 of 4, seed 99, eval_set 'holdout', eval_label 'eval_raw', run_dir 'runs/abi'";
}

}  // namespace

TEST_SUITE("abi_compat") {
  TEST_CASE("this build plays a later baton: an event inserted mid-list, a member appended to State") {
    REQUIRE(baton::kEventCount == 41);
    const auto inserted = baton::parse_event("abi_test_inserted");
    REQUIRE(inserted.has_value());
    CHECK(static_cast<int>(*inserted) == 4);
    CHECK(static_cast<int>(Event::fit_start) == 3);  // before it: numbered as in the plugins' list
    CHECK(static_cast<int>(Event::batch_end) == 18);  // after it: 17 in the plugins' list
    CHECK(baton::State().abi_test_appended == "appended by a newer baton");
  }

  TEST_CASE("a callback built against ABI 4 runs on exactly the events it overrides, found by name") {
    Run run("fixture_abi_callback");
    CHECK(run.trace == std::vector<std::string>{"fixture_abi_callback/init", "fixture_abi_callback/fit_start",
                                                "fixture_abi_callback/batch_end", "fixture_abi_callback/eval_start",
                                                "fixture_abi_callback/predict_end"});
    // Each report's batch is this build's number of the event fired: 18 for batch_end, where the plugin's own list
    // says 17 (after_train_batch here). Every State member it read was where it looked.
    const std::string built_with = "built with 40 events, sizeof(State) ";
    REQUIRE(run.logger.lines.size() == 6);
    REQUIRE(run.logger.lines[0].rfind(built_with, 0) == 0);
    CHECK(run.logger.lines[1] == report("init", 0));
    CHECK(run.logger.lines[2] == report("fit_start", 3));
    CHECK(run.logger.lines[3] == report("batch_end", 18));
    CHECK(run.logger.lines[4] == report("eval_start", 26));
    CHECK(run.logger.lines[5] == report("predict_end", 40));
    // The plugin's State ends where this one's appended member begins.
    const auto plugin_state_size = std::stoul(run.logger.lines[0].substr(built_with.size()));
    CHECK(plugin_state_size + sizeof(std::string) == sizeof(baton::State));
    // Its stop request landed in the stop member, and the appended member is untouched.
    CHECK(run.state.stop_requested());
    CHECK(run.state.stop_reason() == "fixture_abi_callback: stop at predict_end");
    CHECK(run.state.abi_test_appended == "set by the test");
  }

  TEST_CASE("an algorithm built against ABI 4 gets its own Event values, and is never asked about a newer event") {
    Run run("fixture_abi_algorithm");
    CHECK(run.trace == std::vector<std::string>{"fixture_abi_algorithm/after_dataloader",
                                                "fixture_abi_algorithm/eval_end",
                                                "fixture_abi_algorithm/eval_after_all"});
    // after_dataloader is 8 here and 7 in the plugin's list; match was asked about init ... after_dataloader of
    // its list (8 events), not about abi_test_inserted, which it does not know.
    CHECK(run.logger.lines ==
          std::vector<std::string>{"apply after_dataloader: its Event value 7, match asked 8 times, at batch 8",
                                   "on eval_end: eval_set 'holdout'",
                                   "apply eval_after_all: its Event value 31, match asked 32 times, at batch 32"});
    // What dispatch by number would have done: the plugin's 7 and 31 are other events in this build.
    CHECK(baton::event_name(static_cast<Event>(7)) == "before_dataloader");
    CHECK(baton::event_name(static_cast<Event>(31)) == "eval_end");
  }
}
