#include "trainer/schedule.h"
#include "trainer/wall_clock.h"

#include <vector>

#include <doctest/doctest.h>

namespace baton {
namespace {

// A run of 3 epochs of 10 batches, as the trainer decides after its `batch`-th batch: the batch is counted, its
// epoch is not yet (epoch_end comes after the decision).
Progress at_batch(std::int64_t batch) {
  Progress p;
  p.max_duration = Time(3, TimeUnit::epoch);
  p.batches_per_epoch = 10;
  p.samples_per_epoch = 100;
  p.now.batch = batch;
  p.now.epoch = batch > 0 ? (batch - 1) / 10 : 0;
  p.now.batch_in_epoch = batch - 10 * p.now.epoch;
  p.now.sample = batch * 10;
  p.now.sample_in_epoch = p.now.batch_in_epoch * 10;
  return p;
}

double fraction_at(std::int64_t batch) { return at_batch(batch).fraction(); }

TEST_CASE("ba intervals fall due on multiples of n batches") {
  Schedule s(Time(4, TimeUnit::batch), Time(6, TimeUnit::batch), true, true);
  std::vector<std::int64_t> evals, saves;
  for (std::int64_t b = 1; b <= 20; ++b) {
    AfterBatch a = s.after_batch(at_batch(b), fraction_at(b - 1), b % 10 == 0, false);
    if (a.evaluate) evals.push_back(b);
    if (a.save) saves.push_back(b);
  }
  CHECK(evals == std::vector<std::int64_t>{4, 8, 12, 16, 20});
  CHECK(saves == std::vector<std::int64_t>{6, 12, 18});
  CHECK_FALSE(s.eval_due_at_epoch(1));
  CHECK_FALSE(s.save_due_at_epoch(1));
}

TEST_CASE("dur intervals fall due each time the run crosses a multiple of the fraction") {
  // 30 batches; every 0.25 of the run: crossed at batch 7.5 -> 8, 15, 22.5 -> 23, 30.
  Schedule s(Time(0.25, TimeUnit::duration), Time(0, TimeUnit::batch), true, true);
  std::vector<std::int64_t> evals;
  for (std::int64_t b = 1; b <= 30; ++b)
    if (s.after_batch(at_batch(b), fraction_at(b - 1), b % 10 == 0, false).evaluate) evals.push_back(b);
  CHECK(evals == std::vector<std::int64_t>{8, 15, 23, 30});
  CHECK_FALSE(s.saves_enabled());
}

TEST_CASE("ep intervals are decided at the epoch's end, not after its batches") {
  Schedule s(Time(2, TimeUnit::epoch), Time(1, TimeUnit::epoch), true, true);
  for (std::int64_t b = 1; b <= 20; ++b) {
    AfterBatch a = s.after_batch(at_batch(b), fraction_at(b - 1), b % 10 == 0, false);
    CHECK_FALSE(a.evaluate);
    CHECK_FALSE(a.save);
  }
  CHECK_FALSE(s.eval_due_at_epoch(1));
  CHECK(s.eval_due_at_epoch(2));
  CHECK(s.save_due_at_epoch(1));
  CHECK(s.save_due_at_epoch(3));
}

TEST_CASE("the final batch evaluates and saves unless its epoch end does") {
  Schedule s(Time(2, TimeUnit::epoch), Time(2, TimeUnit::epoch), true, true);
  // A run stopped at batch 13: mid-epoch, so the batch itself takes the final evaluation and save.
  AfterBatch mid = s.after_batch(at_batch(13), fraction_at(12), false, true);
  CHECK(mid.evaluate);
  CHECK(mid.save);
  // Batch 20 ends epoch 2 (the count does not include it yet): the epoch end evaluates and saves.
  AfterBatch end2 = s.after_batch(at_batch(20), fraction_at(19), true, true);
  CHECK_FALSE(end2.evaluate);
  CHECK_FALSE(end2.save);
  // Batch 10 ends epoch 1, which has neither due: the final batch takes both.
  AfterBatch end1 = s.after_batch(at_batch(10), fraction_at(9), true, true);
  CHECK(end1.evaluate);
  CHECK(end1.save);
}

TEST_CASE("the run's end lacks an evaluation or a save only when enabled and not already taken at its batch") {
  Schedule on(Time(1, TimeUnit::epoch), Time(1, TimeUnit::epoch), true, true);
  CHECK(on.final_eval_missing(-1, 0));  // resumed at its end: nothing evaluated in this process yet
  CHECK(on.final_eval_missing(10, 13));  // stopped outside batch_end, after the last evaluation at batch 10
  CHECK_FALSE(on.final_eval_missing(13, 13));
  CHECK(on.final_save_missing(10, 13));
  CHECK_FALSE(on.final_save_missing(13, 13));
  Schedule off(Time(0, TimeUnit::epoch), Time(0, TimeUnit::epoch), true, true);
  CHECK_FALSE(off.final_eval_missing(-1, 13));
  CHECK_FALSE(off.final_save_missing(-1, 13));
  Schedule no_folder(Time(1, TimeUnit::epoch), Time(1, TimeUnit::epoch), false, false);
  CHECK_FALSE(no_folder.final_eval_missing(-1, 13));
  CHECK_FALSE(no_folder.final_save_missing(-1, 13));
}

TEST_CASE("a zero interval, no eval data or no run folder disables the decisions") {
  Schedule off(Time(0, TimeUnit::epoch), Time(0, TimeUnit::epoch), true, true);
  CHECK_FALSE(off.evaluations_enabled());
  CHECK_FALSE(off.saves_enabled());
  AfterBatch a = off.after_batch(at_batch(5), fraction_at(4), false, true);
  CHECK_FALSE(a.evaluate);
  CHECK_FALSE(a.save);
  Schedule no_data(Time(1, TimeUnit::batch), Time(1, TimeUnit::batch), false, false);
  AfterBatch b = no_data.after_batch(at_batch(5), fraction_at(4), false, true);
  CHECK_FALSE(b.evaluate);
  CHECK_FALSE(b.save);
}

TEST_CASE("a wall-clock save interval: saves by time fall due that long after the last save, ba/ep intervals are the "
          "schedule's") {
  Schedule by_time(Time(1, TimeUnit::epoch), Time::parse("30min"), true, true);
  CHECK(by_time.saves_enabled());
  for (std::int64_t b = 1; b <= 30; ++b) CHECK_FALSE(by_time.after_batch(at_batch(b), fraction_at(b - 1), b % 10 == 0, false).save);
  CHECK_FALSE(by_time.save_due_at_epoch(1));
  CHECK(by_time.after_batch(at_batch(30), fraction_at(29), true, true).save);  // the run's end still saves

  WallClock clock(Time::parse("30min"), Time(0, TimeUnit::second));
  CHECK_FALSE(clock.has_limit());
  CHECK_FALSE(clock.save_due(1799));
  CHECK(clock.save_due(1800));
  clock.saved_at(1850);  // a save at 1850 s: the next one 30 min later
  CHECK_FALSE(clock.save_due(3649));
  CHECK(clock.save_due(3650));
  CHECK_FALSE(clock.limit_near(1e9));  // no limit
  WallClock batches(Time(100, TimeUnit::batch), Time(0, TimeUnit::second));
  CHECK_FALSE(batches.save_due(1e9));  // a ba interval is not the clock's
}

TEST_CASE("a time limit stops when what is left of it no longer covers the longest batch, evaluation and "
          "twice the save (the checkpoint and the export), with a quarter more") {
  WallClock clock(Time(1, TimeUnit::epoch), Time::parse("1h"));
  CHECK(clock.has_limit());
  CHECK(clock.limit() == 3600);
  clock.guess_first_save(2.0);
  clock.took(WallClock::Activity::batch, 4.0);
  // No save timed yet: the guess stands in for it, twice (the checkpoint and the export). 1.25 * (4 + 0 + 2 * 2) = 10
  CHECK(clock.margin() == doctest::Approx(10.0));
  CHECK_FALSE(clock.limit_near(3589.9));
  CHECK(clock.limit_near(3590.0));
  clock.took(WallClock::Activity::batch, 3.0);  // the longest counts, not the last
  clock.took(WallClock::Activity::evaluation, 20.0);
  clock.took(WallClock::Activity::save, 1.0);   // timed: the guess no longer counts
  // 1.25 * (4 + 20 + 2 * 1) = 32.5
  CHECK(clock.margin() == doctest::Approx(32.5));
  CHECK_FALSE(clock.limit_near(3567.4));
  CHECK(clock.limit_near(3567.5));
  CHECK(clock.limit_near(4000));  // past the limit: stop at once
  const std::string why = clock.stop_reason(3570);
  CHECK(why.find("trainer.time_limit 1h") != std::string::npos);
  CHECK(why.find("3570.0 s of the fit, 30.0 s before the limit") != std::string::npos);
  CHECK(why.find("--resume auto") != std::string::npos);
  CHECK_FALSE(clock.save_due(1e9));  // an ep save interval is the schedule's
}

}  // namespace
}  // namespace baton
