#include "baton/event.h"

#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

using baton::Event;

TEST_SUITE("events") {
  TEST_CASE("the list has Composer's 40 events in firing order") {
    CHECK(baton::kEventCount == 40);
    CHECK(baton::kAllEvents.front() == Event::init);
    CHECK(baton::kAllEvents.back() == Event::predict_end);
    // A few orderings the trainer relies on.
    auto pos = [](Event e) { return static_cast<int>(e); };
    CHECK(pos(Event::batch_end) < pos(Event::batch_checkpoint));
    CHECK(pos(Event::batch_checkpoint) < pos(Event::epoch_end));
    CHECK(pos(Event::epoch_end) < pos(Event::epoch_checkpoint));
    CHECK(pos(Event::after_backward) < pos(Event::after_train_batch));
    CHECK(pos(Event::fit_end) < pos(Event::eval_before_all));
  }

  TEST_CASE("names are lowercase, unique and round-trip") {
    std::set<std::string> seen;
    for (Event e : baton::kAllEvents) {
      std::string name(baton::event_name(e));
      CHECK(seen.insert(name).second);
      for (char c : name) CHECK(((c >= 'a' && c <= 'z') || c == '_'));
      auto parsed = baton::parse_event(name);
      REQUIRE(parsed.has_value());
      CHECK(*parsed == e);
    }
    CHECK(baton::event_name(Event::batch_end) == "batch_end");
    CHECK_FALSE(baton::parse_event("Batch_End").has_value());
    CHECK_FALSE(baton::parse_event("").has_value());
  }

  TEST_CASE("before/after/eval/predict/checkpoint helpers") {
    CHECK(baton::is_before_event(Event::before_forward));
    CHECK(baton::is_before_event(Event::eval_before_forward));
    CHECK(baton::is_before_event(Event::before_load));
    CHECK_FALSE(baton::is_before_event(Event::batch_start));
    CHECK(baton::is_after_event(Event::after_backward));
    CHECK(baton::is_after_event(Event::predict_after_forward));
    CHECK(baton::is_after_event(Event::eval_after_all));
    CHECK_FALSE(baton::is_after_event(Event::batch_end));
    CHECK(baton::is_eval_event(Event::eval_start));
    CHECK(baton::is_eval_event(Event::eval_standalone_end));
    CHECK_FALSE(baton::is_eval_event(Event::fit_end));
    CHECK(baton::is_predict_event(Event::predict_batch_end));
    CHECK_FALSE(baton::is_predict_event(Event::batch_end));
    CHECK(baton::is_checkpoint_event(Event::batch_checkpoint));
    CHECK(baton::is_checkpoint_event(Event::epoch_checkpoint));
    CHECK(baton::is_checkpoint_event(Event::iteration_checkpoint));
    CHECK_FALSE(baton::is_checkpoint_event(Event::batch_end));
    int before = 0, after = 0;
    for (Event e : baton::kAllEvents) {
      before += baton::is_before_event(e);
      after += baton::is_after_event(e);
    }
    // Counted by hand from Composer's list: before_load, before_dataloader, before_train_batch, before_forward,
    // before_loss, before_backward, eval_before_all, eval_before_forward, predict_before_forward; and the nine
    // matching after_* events (after_train_batch stands in for the missing before/after pair of batch_end).
    CHECK(before == 9);
    CHECK(after == 9);
  }

  TEST_CASE("docs/events.md lists exactly the events of events.def, in firing order") {
    std::ifstream doc(std::string(BATON_SOURCE_DIR) + "/docs/events.md");
    REQUIRE(doc.good());
    std::regex row(R"(^\| (\d+) \| `([a-z_]+)` \|)");
    std::vector<std::string> listed;
    std::string line;
    while (std::getline(doc, line)) {
      std::smatch m;
      if (std::regex_search(line, m, row)) {
        CHECK(std::stoi(m[1]) == static_cast<int>(listed.size()) + 1);
        listed.push_back(m[2]);
      }
    }
    REQUIRE(listed.size() == baton::kEventCount);
    for (std::size_t i = 0; i < listed.size(); ++i) CHECK(listed[i] == baton::event_name(baton::kAllEvents[i]));
  }
}
