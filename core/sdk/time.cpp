#include "baton/time.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <string>

#include "baton/error.h"

namespace baton {
namespace {

constexpr std::array<TimeUnit, 7> kUnits = {TimeUnit::epoch,     TimeUnit::batch,    TimeUnit::sample,
                                            TimeUnit::token,     TimeUnit::iteration, TimeUnit::duration,
                                            TimeUnit::second};

// The wall-clock suffixes besides "s", and their seconds.
struct WallUnit {
  std::string_view suffix;
  double seconds;
};
constexpr std::array<WallUnit, 3> kWallUnits = {WallUnit{"s", 1}, WallUnit{"min", 60}, WallUnit{"h", 3600}};

// Counts above 2^53 would not survive the trip through double.
constexpr double kMaxCount = 9007199254740992.0;

const char* kValidUnits =
    "ep, ba, sp, tok, iter (integers), dur (fraction of the run) or s, min, h (wall-clock time, where a key takes it)";

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

[[noreturn]] void bad_time(std::string_view text, const std::string& why) {
  throw TimeError("invalid time " + in_quotes(text) + ": " + why + "; expected <number><unit> with unit one of " +
                  kValidUnits + ", e.g. \"2ep\", \"500ba\", \"0.5dur\"");
}

// The number part: digits with an optional fraction. Signs, exponents, spaces, nan and inf are not times.
bool is_plain_number(std::string_view digits) {
  std::size_t dots = 0;
  std::size_t count = 0;
  for (char c : digits) {
    if (c == '.')
      ++dots;
    else if (c >= '0' && c <= '9')
      ++count;
    else
      return false;
  }
  return count > 0 && dots <= 1 && digits.front() != '.' && digits.back() != '.';
}

std::int64_t batches_for_samples(std::int64_t samples, std::int64_t samples_per_epoch, std::int64_t batches_per_epoch) {
  // Whole epochs convert exactly; the rest of an epoch rounds up, because a started batch has to run.
  const std::int64_t epochs = samples / samples_per_epoch;
  const std::int64_t rest = samples % samples_per_epoch;
  return epochs * batches_per_epoch + (rest * batches_per_epoch + samples_per_epoch - 1) / samples_per_epoch;
}

void require_positive(std::int64_t value, const char* what, const Time& t) {
  if (value <= 0)
    throw TimeError("cannot convert " + t.str() + " to batches: " + what + " is " + std::to_string(value) +
                    " (it must be > 0)");
}

// Decimal fractions such as 0.1dur are not exact in binary; this keeps 0.3 of 10 batches at 3 batches.
constexpr double kDurTolerance = 1e-9;

// Why value cannot be a time in unit, or "" when it can.
std::string value_problem(double value, TimeUnit unit) {
  if (!std::isfinite(value)) return "the value must be a finite number";
  if (value < 0) return "times cannot be negative";
  if (unit == TimeUnit::duration) return "";
  if (unit == TimeUnit::second && value != std::floor(value)) return "wall-clock time is counted in whole seconds";
  if (value != std::floor(value))
    return std::string(unit_suffix(unit)) + " needs a whole number (only dur takes fractions)";
  if (value > kMaxCount) return "the value is too large";
  return "";
}

}  // namespace

std::string_view unit_suffix(TimeUnit unit) noexcept {
  switch (unit) {
    case TimeUnit::epoch: return "ep";
    case TimeUnit::batch: return "ba";
    case TimeUnit::sample: return "sp";
    case TimeUnit::token: return "tok";
    case TimeUnit::iteration: return "iter";
    case TimeUnit::duration: return "dur";
    case TimeUnit::second: return "s";
  }
  return "?";
}

Time::Time(double value, TimeUnit unit) : value_(value), unit_(unit) {
  const std::string problem = value_problem(value, unit);
  if (!problem.empty())
    throw TimeError("invalid time " + in_quotes(format_exact(value) + std::string(unit_suffix(unit))) + ": " +
                    problem);
}

Time Time::parse(std::string_view text) {
  std::size_t split = 0;
  while (split < text.size() && ((text[split] >= '0' && text[split] <= '9') || text[split] == '.' ||
                                 text[split] == '-' || text[split] == '+'))
    ++split;
  const std::string_view number = text.substr(0, split);
  const std::string_view suffix = text.substr(split);
  if (text.empty()) bad_time(text, "the string is empty");
  if (!number.empty() && (number.front() == '-')) bad_time(text, "times cannot be negative");
  if (!is_plain_number(number)) bad_time(text, "it does not start with a number");
  // Wall-clock parts, the larger first: "1h30min", "2min30s".
  for (const WallUnit& wall : kWallUnits) {
    const std::size_t n = wall.suffix.size();
    if (suffix.size() > n && suffix.substr(0, n) == wall.suffix && suffix[n] >= '0' && suffix[n] <= '9') {
      if (!is_plain_number(number)) bad_time(text, "it does not start with a number");
      Time rest;
      try {
        rest = parse(suffix.substr(n));
      } catch (const TimeError&) {
      }
      if (rest.unit() != TimeUnit::second)
        bad_time(text, "after " + in_quotes(text.substr(0, split + n)) + " comes no wall-clock time");
      if (rest.value() >= wall.seconds)
        bad_time(text, "a wall-clock time of several parts goes from the largest unit to the smallest (\"1h30min\")");
      const double seconds = std::strtod(std::string(number).c_str(), nullptr) * wall.seconds + rest.value();
      const std::string problem = value_problem(seconds, TimeUnit::second);
      if (!problem.empty()) bad_time(text, problem);
      return Time(seconds, TimeUnit::second);
    }
  }
  TimeUnit unit{};
  bool known = false;
  double scale = 1;  // a wall-clock unit's seconds
  for (TimeUnit candidate : kUnits) {
    if (suffix == unit_suffix(candidate)) {
      unit = candidate;
      known = true;
    }
  }
  for (const WallUnit& wall : kWallUnits) {
    if (suffix == wall.suffix) {
      unit = TimeUnit::second;
      scale = wall.seconds;
      known = true;
    }
  }
  if (!known) bad_time(text, suffix.empty() ? "the unit is missing" : "unknown unit " + in_quotes(suffix));
  const double value = std::strtod(std::string(number).c_str(), nullptr) * scale;
  const std::string problem = value_problem(value, unit);
  if (!problem.empty()) bad_time(text, problem);
  return Time(value, unit);
}

std::int64_t Time::count() const {
  if (unit_ == TimeUnit::duration)
    throw TimeError("time " + in_quotes(str()) + " is a fraction of the run, not a count");
  return static_cast<std::int64_t>(value_);
}

std::string Time::str() const {
  if (unit_ == TimeUnit::duration) return format_exact(value_) + "dur";
  if (unit_ == TimeUnit::second) {
    const auto seconds = static_cast<std::int64_t>(value_);
    for (auto wall = kWallUnits.rbegin(); wall != kWallUnits.rend(); ++wall) {
      const auto per = static_cast<std::int64_t>(wall->seconds);
      if (seconds % per == 0 && (seconds != 0 || per == 1)) return std::to_string(seconds / per) + std::string(wall->suffix);
    }
  }
  return std::to_string(static_cast<std::int64_t>(value_)) + std::string(unit_suffix(unit_));
}

namespace {
void require_same_unit(const Time& a, const Time& b) {
  if (a.unit() != b.unit())
    throw TimeError("cannot compare times in different units: " + in_quotes(a.str()) + " and " + in_quotes(b.str()));
}
}  // namespace

bool operator<(const Time& a, const Time& b) {
  require_same_unit(a, b);
  return a.value() < b.value();
}

bool operator==(const Time& a, const Time& b) {
  require_same_unit(a, b);
  return a.value() == b.value();
}

std::int64_t Timestamp::get(TimeUnit unit) const {
  switch (unit) {
    case TimeUnit::epoch: return epoch;
    case TimeUnit::batch: return batch;
    case TimeUnit::sample: return sample;
    case TimeUnit::token: return token;
    case TimeUnit::iteration: return iteration;
    case TimeUnit::duration: break;
    case TimeUnit::second: throw TimeError("wall-clock time (s, min, h) is not a counter of training progress");
  }
  throw TimeError("dur is a fraction of the run, not a counter: use Progress::fraction()");
}

void Timestamp::advance_batch(std::int64_t samples) {
  batch += 1;
  batch_in_epoch += 1;
  sample += samples;
  sample_in_epoch += samples;
}

void Timestamp::advance_epoch() {
  epoch += 1;
  iteration += 1;
  batch_in_epoch = 0;
  sample_in_epoch = 0;
}

std::string format_timestamp(const Timestamp& t) {
  return "ep " + std::to_string(t.epoch) + " ba " + std::to_string(t.batch);
}

double Progress::fraction() const {
  if (max_duration.unit() == TimeUnit::duration)
    throw TimeError("max_duration " + in_quotes(max_duration.str()) + " cannot be a fraction of itself");
  const double total = static_cast<double>(max_duration.count());
  if (total <= 0) return 1.0;
  double done = static_cast<double>(now.get(max_duration.unit()));
  // Counting batches within the epoch makes an epoch-long run progress smoothly instead of in whole epochs.
  if (max_duration.unit() == TimeUnit::epoch && batches_per_epoch > 0)
    done = static_cast<double>(now.batch) / static_cast<double>(batches_per_epoch);
  const double f = done / total;
  return f < 0 ? 0.0 : (f > 1 ? 1.0 : f);
}

bool Progress::reached(const Time& t) const {
  if (t.unit() == TimeUnit::duration) return fraction() >= t.value() - kDurTolerance;
  return now.get(t.unit()) >= t.count();
}

std::int64_t Progress::to_batches(const Time& t) const {
  switch (t.unit()) {
    case TimeUnit::batch: return t.count();
    case TimeUnit::epoch:
      require_positive(batches_per_epoch, "batches_per_epoch", t);
      return t.count() * batches_per_epoch;
    case TimeUnit::sample:
      require_positive(batches_per_epoch, "batches_per_epoch", t);
      require_positive(samples_per_epoch, "samples_per_epoch", t);
      return batches_for_samples(t.count(), samples_per_epoch, batches_per_epoch);
    case TimeUnit::duration: {
      if (max_duration.unit() == TimeUnit::duration)
        throw TimeError("cannot convert " + t.str() + " to batches: max_duration " + max_duration.str() +
                        " is itself a fraction");
      const double total = static_cast<double>(to_batches(max_duration));
      return static_cast<std::int64_t>(std::ceil(t.value() * total - kDurTolerance));
    }
    case TimeUnit::token:
    case TimeUnit::iteration:
    case TimeUnit::second: break;
  }
  throw TimeError("cannot convert " + t.str() + " to batches: only ep, ba, sp and dur convert");
}

}  // namespace baton
