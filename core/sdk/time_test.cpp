#include <doctest/doctest.h>

#include <limits>
#include <string>

#include "baton/error.h"
#include "baton/time.h"

using baton::Progress;
using baton::Time;
using baton::TimeError;
using baton::Timestamp;
using baton::TimeUnit;

namespace {

// The message of the TimeError that parse throws, or "" when it does not throw.
std::string parse_error(const std::string& text) {
  try {
    Time::parse(text);
  } catch (const TimeError& e) {
    return e.what();
  }
  return "";
}

Progress progress(Time max_duration, std::int64_t batches_per_epoch, std::int64_t samples_per_epoch) {
  Progress p;
  p.max_duration = max_duration;
  p.batches_per_epoch = batches_per_epoch;
  p.samples_per_epoch = samples_per_epoch;
  return p;
}

}  // namespace

TEST_SUITE("time") {
  TEST_CASE("parse reads every unit") {
    CHECK(Time::parse("2ep").unit() == TimeUnit::epoch);
    CHECK(Time::parse("2ep").value() == 2);
    CHECK(Time::parse("500ba").unit() == TimeUnit::batch);
    CHECK(Time::parse("500ba").count() == 500);
    CHECK(Time::parse("64sp").unit() == TimeUnit::sample);
    CHECK(Time::parse("1000tok").unit() == TimeUnit::token);
    CHECK(Time::parse("7iter").unit() == TimeUnit::iteration);
    CHECK(Time::parse("7iter").count() == 7);
    CHECK(Time::parse("0.5dur").unit() == TimeUnit::duration);
    CHECK(Time::parse("0.5dur").value() == 0.5);
    CHECK(Time::parse("0ba").count() == 0);
    CHECK(Time::parse("1dur").value() == 1.0);
  }

  TEST_CASE("parse rejects malformed times, quoting the string and listing the units") {
    for (const char* text : {"1.5ep", "-1ba", "", "12", "3epochs", "2ep!", "2 ep", " 2ep", "2ep ", "nanba",
                             "infdur", "nan", "ep", "1..5dur", ".5dur", "5.dur", "+3ba", "1e3ba", "0x10ba"}) {
      CAPTURE(text);
      const std::string message = parse_error(text);
      REQUIRE(!message.empty());
      CHECK(message.find("\"" + std::string(text) + "\"") != std::string::npos);
      CHECK(message.find("ep, ba, sp, tok, iter") != std::string::npos);
      CHECK(message.find("dur") != std::string::npos);
    }
    CHECK(parse_error("1.5ep").find("whole number") != std::string::npos);
    CHECK(parse_error("-1ba").find("negative") != std::string::npos);
    CHECK(parse_error("3epochs").find("unknown unit \"epochs\"") != std::string::npos);
    CHECK(parse_error("12").find("unit is missing") != std::string::npos);
    CHECK(parse_error("").find("empty") != std::string::npos);
    CHECK(parse_error("99999999999999999999ba").find("too large") != std::string::npos);
  }

  TEST_CASE("the constructor checks the value") {
    CHECK_THROWS_AS(Time(1.5, TimeUnit::batch), TimeError);
    CHECK_THROWS_AS(Time(-1, TimeUnit::duration), TimeError);
    CHECK_NOTHROW(Time(0.25, TimeUnit::duration));
    CHECK_THROWS_AS(Time(std::numeric_limits<double>::quiet_NaN(), TimeUnit::duration), TimeError);
    CHECK_THROWS_AS(Time(std::numeric_limits<double>::infinity(), TimeUnit::epoch), TimeError);
    CHECK(Time(3, TimeUnit::sample).count() == 3);
    CHECK_THROWS_AS(Time(0.25, TimeUnit::duration).count(), TimeError);
  }

  TEST_CASE("str round-trips") {
    CHECK(Time::parse("2ep").str() == "2ep");
    CHECK(Time::parse("0.5dur").str() == "0.5dur");
    CHECK(Time::parse("0.1dur").str() == "0.1dur");
    CHECK(Time::parse("123456789tok").str() == "123456789tok");
    CHECK(Time(4, TimeUnit::iteration).str() == "4iter");
    CHECK(Time(1, TimeUnit::duration).str() == "1dur");
    for (const char* text : {"2ep", "500ba", "64sp", "9tok", "3iter", "0.5dur", "0.125dur", "0.333dur"})
      CHECK(Time::parse(Time::parse(text).str()) == Time::parse(text));
  }

  TEST_CASE("wall-clock times: s, min and h read as whole seconds, written in the largest unit that keeps them whole") {
    CHECK(Time::parse("90s").unit() == TimeUnit::second);
    CHECK(Time::parse("90s").count() == 90);
    CHECK(Time::parse("30min").count() == 1800);
    CHECK(Time::parse("2h").count() == 7200);
    CHECK(Time::parse("1.5h").count() == 5400);
    CHECK(Time::parse("0.5min").count() == 30);
    CHECK(Time::parse("0s").count() == 0);
    CHECK(Time::parse("5400s").str() == "90min");
    CHECK(Time::parse("7200s").str() == "2h");
    CHECK(Time::parse("1.5h").str() == "90min");
    CHECK(Time::parse("61s").str() == "61s");
    CHECK(Time::parse("0h").str() == "0s");
    for (const char* text : {"1s", "59s", "1min", "45min", "3h", "100h"})
      CHECK(Time::parse(Time::parse(text).str()) == Time::parse(text));
    CHECK(Time::parse("60s") == Time::parse("1min"));
    // Several parts, the larger first.
    CHECK(Time::parse("1h30min").count() == 5400);
    CHECK(Time::parse("3h50min").count() == 13800);
    CHECK(Time::parse("2min30s").count() == 150);
    CHECK(Time::parse("1h0min5s").count() == 3605);
    CHECK(parse_error("30min1h").find("from the largest unit to the smallest") != std::string::npos);
    CHECK(parse_error("1h90min").find("from the largest unit to the smallest") != std::string::npos);
    CHECK(parse_error("1h30ba").find("after \"1h\" comes no wall-clock time") != std::string::npos);
    CHECK(parse_error("1h30").find("after \"1h\" comes no wall-clock time") != std::string::npos);
    CHECK(parse_error("0.5s").find("whole seconds") != std::string::npos);
    CHECK(parse_error("0.01min").find("whole seconds") != std::string::npos);
    CHECK(parse_error("2hours").find("unknown unit \"hours\"") != std::string::npos);
    CHECK(parse_error("2hours").find("s, min, h") != std::string::npos);
    // Not a counter of progress: refused where one is needed.
    Progress p;
    p.max_duration = Time(1, TimeUnit::epoch);
    p.batches_per_epoch = 10;
    CHECK_THROWS_AS((void)p.reached(Time::parse("1min")), TimeError);
    CHECK_THROWS_AS((void)p.to_batches(Time::parse("1min")), TimeError);
    CHECK_THROWS_AS((void)(Time::parse("60s") < Time::parse("1ba")), TimeError);
  }

  TEST_CASE("comparisons within a unit, and an error across units naming both") {
    CHECK(Time::parse("1ep") < Time::parse("2ep"));
    CHECK(Time::parse("2ep") == Time::parse("2ep"));
    CHECK(Time::parse("3ba") != Time::parse("4ba"));
    CHECK(Time::parse("0.75dur") > Time::parse("0.5dur"));
    CHECK(Time::parse("5sp") <= Time::parse("5sp"));
    CHECK(Time::parse("5sp") >= Time::parse("4sp"));
    try {
      (void)(Time::parse("2ep") < Time::parse("100ba"));
      FAIL("no TimeError");
    } catch (const TimeError& e) {
      const std::string message = e.what();
      CHECK(message.find("\"2ep\"") != std::string::npos);
      CHECK(message.find("\"100ba\"") != std::string::npos);
    }
    CHECK_THROWS_AS((void)(Time::parse("1ep") == Time::parse("1ba")), TimeError);
  }

  TEST_CASE("Timestamp::get returns each counter, dur throws") {
    Timestamp t;
    t.epoch = 1;
    t.batch = 2;
    t.sample = 3;
    t.token = 4;
    t.iteration = 5;
    CHECK(t.get(TimeUnit::epoch) == 1);
    CHECK(t.get(TimeUnit::batch) == 2);
    CHECK(t.get(TimeUnit::sample) == 3);
    CHECK(t.get(TimeUnit::token) == 4);
    CHECK(t.get(TimeUnit::iteration) == 5);
    CHECK_THROWS_AS(t.get(TimeUnit::duration), TimeError);
  }

  TEST_CASE("advance_batch counts a batch and its samples, advance_epoch restarts the epoch's counters") {
    Timestamp t;
    t.advance_batch(64);
    t.advance_batch(36);  // a short last batch
    CHECK(t.batch == 2);
    CHECK(t.batch_in_epoch == 2);
    CHECK(t.sample == 100);
    CHECK(t.sample_in_epoch == 100);
    CHECK(t.epoch == 0);
    t.advance_epoch();
    CHECK(t.epoch == 1);
    CHECK(t.iteration == 1);
    CHECK(t.batch_in_epoch == 0);
    CHECK(t.sample_in_epoch == 0);
    CHECK(t.batch == 2);  // totals keep counting across epochs
    CHECK(t.sample == 100);
    t.advance_batch(64);
    CHECK(t.batch == 3);
    CHECK(t.batch_in_epoch == 1);
    CHECK(t.sample == 164);
  }

  TEST_CASE("fraction of an epoch-long run counts batches") {
    // 2 epochs of 10 batches: after 5 batches a quarter of the run is done.
    Progress p = progress(Time::parse("2ep"), 10, 1000);
    p.now.batch = 5;
    CHECK(p.fraction() == doctest::Approx(0.25));
    p.now.batch = 20;
    p.now.epoch = 2;
    CHECK(p.fraction() == doctest::Approx(1.0));
    p.now.batch = 30;  // past the end is clamped
    CHECK(p.fraction() == 1.0);
    // Without batches_per_epoch only whole epochs count.
    Progress whole = progress(Time::parse("4ep"), 0, 0);
    whole.now.epoch = 1;
    whole.now.batch = 7;
    CHECK(whole.fraction() == doctest::Approx(0.25));
  }

  TEST_CASE("fraction of batch- and sample-long runs") {
    Progress by_batch = progress(Time::parse("200ba"), 10, 1000);
    by_batch.now.batch = 50;
    CHECK(by_batch.fraction() == doctest::Approx(0.25));
    Progress by_sample = progress(Time::parse("1000sp"), 10, 1000);
    by_sample.now.sample = 600;
    CHECK(by_sample.fraction() == doctest::Approx(0.6));
    Progress empty = progress(Time::parse("0ba"), 10, 1000);
    CHECK(empty.fraction() == 1.0);
    Progress nonsense = progress(Time::parse("0.5dur"), 10, 1000);
    CHECK_THROWS_AS(nonsense.fraction(), TimeError);
  }

  TEST_CASE("reached for every unit") {
    Progress p = progress(Time::parse("4ep"), 10, 320);
    p.now.epoch = 1;
    p.now.batch = 15;
    p.now.sample = 480;
    p.now.token = 9000;
    p.now.iteration = 1;
    CHECK(p.reached(Time::parse("1ep")));
    CHECK_FALSE(p.reached(Time::parse("2ep")));
    CHECK(p.reached(Time::parse("15ba")));
    CHECK_FALSE(p.reached(Time::parse("16ba")));
    CHECK(p.reached(Time::parse("480sp")));
    CHECK_FALSE(p.reached(Time::parse("481sp")));
    CHECK(p.reached(Time::parse("9000tok")));
    CHECK_FALSE(p.reached(Time::parse("9001tok")));
    CHECK(p.reached(Time::parse("1iter")));
    CHECK_FALSE(p.reached(Time::parse("2iter")));
    // 15 of 40 batches = 0.375 of the run.
    CHECK(p.reached(Time::parse("0.375dur")));
    CHECK(p.reached(Time::parse("0.3dur")));
    CHECK_FALSE(p.reached(Time::parse("0.4dur")));
    CHECK(p.reached(Time::parse("0dur")));
  }

  TEST_CASE("reached for decimal fractions lands on the exact batch") {
    // 0.3 of 10 batches is batch 3, although 0.3 is not exact in binary.
    Progress p = progress(Time::parse("10ba"), 5, 100);
    p.now.batch = 3;
    CHECK(p.reached(Time::parse("0.3dur")));
    p.now.batch = 2;
    CHECK_FALSE(p.reached(Time::parse("0.3dur")));
  }

  TEST_CASE("to_batches converts ep, ba, sp and dur") {
    // 1000 samples per epoch in 8 batches (batch size 128, a last batch of 104).
    Progress p = progress(Time::parse("3ep"), 8, 1000);
    CHECK(p.to_batches(Time::parse("2ep")) == 16);
    CHECK(p.to_batches(Time::parse("37ba")) == 37);
    CHECK(p.to_batches(Time::parse("1000sp")) == 8);
    CHECK(p.to_batches(Time::parse("2000sp")) == 16);
    CHECK(p.to_batches(Time::parse("1100sp")) == 9);   // 8 + ceil(100 * 8 / 1000) = 8 + 1
    CHECK(p.to_batches(Time::parse("250sp")) == 2);    // ceil(250 * 8 / 1000) = 2
    CHECK(p.to_batches(Time::parse("251sp")) == 3);    // ceil(2.008) = 3
    CHECK(p.to_batches(Time::parse("0sp")) == 0);
    // The run is 24 batches long.
    CHECK(p.to_batches(Time::parse("0.5dur")) == 12);
    CHECK(p.to_batches(Time::parse("0.1dur")) == 3);   // ceil(2.4)
    CHECK(p.to_batches(Time::parse("1dur")) == 24);
    Progress tens = progress(Time::parse("10ba"), 5, 100);
    CHECK(tens.to_batches(Time::parse("0.3dur")) == 3);
    CHECK(tens.to_batches(Time::parse("0.7dur")) == 7);
    Progress by_samples = progress(Time::parse("1500sp"), 8, 1000);
    CHECK(by_samples.to_batches(Time::parse("0.5dur")) == 6);  // the run is 8 + 4 = 12 batches
  }

  TEST_CASE("to_batches errors") {
    Progress p = progress(Time::parse("3ep"), 8, 1000);
    CHECK_THROWS_AS(p.to_batches(Time::parse("5tok")), TimeError);
    CHECK_THROWS_AS(p.to_batches(Time::parse("5iter")), TimeError);
    Progress unknown = progress(Time::parse("3ep"), 0, 0);
    CHECK_THROWS_AS(unknown.to_batches(Time::parse("1ep")), TimeError);
    CHECK_THROWS_AS(unknown.to_batches(Time::parse("10sp")), TimeError);
    CHECK(unknown.to_batches(Time::parse("10ba")) == 10);
  }

  TEST_CASE("format_timestamp names the epoch and the total batch count") {
    Timestamp t;
    CHECK(baton::format_timestamp(t) == "ep 0 ba 0");
    t.epoch = 2;
    t.batch = 300;
    t.sample = 9600;          // the other counters are not part of the text
    t.batch_in_epoch = 100;
    CHECK(baton::format_timestamp(t) == "ep 2 ba 300");
  }
}
