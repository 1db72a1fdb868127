#include "trainer/wall_clock.h"

#include <algorithm>
#include <cstdio>

namespace baton {
namespace {

double seconds_of(const Time& t) { return t.unit() == TimeUnit::second ? t.value() : 0.0; }

}  // namespace

WallClock::WallClock(Time save_interval, Time time_limit)
    : limit_time_(time_limit), save_every_(seconds_of(save_interval)), limit_(seconds_of(time_limit)) {}

void WallClock::took(Activity what, double seconds) {
  switch (what) {
    case Activity::batch: longest_batch_ = std::max(longest_batch_, seconds); break;
    case Activity::evaluation: longest_evaluation_ = std::max(longest_evaluation_, seconds); break;
    case Activity::save: longest_save_ = std::max(longest_save_, seconds); break;
  }
}

void WallClock::saved_at(double now) { last_save_ = now; }

bool WallClock::save_due(double now) const { return save_every_ > 0 && now - last_save_ >= save_every_; }

double WallClock::save_estimate() const { return longest_save_ >= 0 ? longest_save_ : first_save_guess_; }

double WallClock::margin() const {
  const double save = save_estimate();
  // The save twice: the stop's checkpoint, and the export of the model at the end of the fit.
  return 1.25 * (longest_batch_ + longest_evaluation_ + 2 * save);
}

bool WallClock::limit_near(double now) const { return limit_ > 0 && limit_ - now <= margin(); }

std::string WallClock::stop_reason(double now) const {
  const double save = save_estimate();
  char text[320];
  std::snprintf(text, sizeof text,
                "trainer.time_limit %s: stopped after %.1f s of the fit, %.1f s before the limit (the longest batch, "
                "evaluation and checkpoint so far took %.1f, %.1f and %.1f s%s); `--resume auto` continues the run",
                limit_time_.str().c_str(), now, limit_ - now, longest_batch_, longest_evaluation_, save,
                longest_save_ >= 0 ? "" : ", the checkpoint's guessed: none was timed yet");
  return text;
}

}  // namespace baton
