#include "baton/time.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <string>

#include "baton/error.h"

namespace baton {
namespace {

constexpr std::array<TimeUnit, 6> kUnits = {TimeUnit::epoch,     TimeUnit::batch,     TimeUnit::sample,
                                            TimeUnit::token,     TimeUnit::iteration, TimeUnit::duration};

// Counts above 2^53 would not survive the trip through double.
constexpr double kMaxCount = 9007199254740992.0;

const char* kValidUnits = "ep, ba, sp, tok, iter (integers) or dur (fraction of the run)";

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
  TimeUnit unit{};
  bool known = false;
  for (TimeUnit candidate : kUnits) {
    if (suffix == unit_suffix(candidate)) {
      unit = candidate;
      known = true;
    }
  }
  if (!known) bad_time(text, suffix.empty() ? "the unit is missing" : "unknown unit " + in_quotes(suffix));
  const double value = std::strtod(std::string(number).c_str(), nullptr);
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
    case TimeUnit::iteration: break;
  }
  throw TimeError("cannot convert " + t.str() + " to batches: only ep, ba, sp and dur convert");
}

}  // namespace baton
