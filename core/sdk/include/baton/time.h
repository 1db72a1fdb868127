#pragma once
// Training time, as in Composer: "<number><unit>" with units ep (epochs), ba (batches), sp (samples),
// tok (tokens), iter (iterations) and dur (fraction of the whole run). Values are integral except for dur. Wall-clock
// time is a unit too, for the keys that take it (a checkpoint every "30min", a time limit of "2h"): "s", "min" and
// "h", kept as whole seconds (TimeUnit::second); it is no counter of training progress, so Progress refuses it.
// No LibTorch here: part of the plugin SDK.
#include <cstdint>
#include <string>
#include <string_view>

#include "baton/export.h"
#include "baton/text.h"  // format_number, which times are read with

namespace baton {

enum class TimeUnit : unsigned char { epoch, batch, sample, token, iteration, duration, second };

/// "ep", "ba", "sp", "tok", "iter", "dur", "s" (second: "min" and "h" are read into it too).
BATON_API std::string_view unit_suffix(TimeUnit unit) noexcept;

class BATON_API Time {
 public:
  Time() = default;
  Time(double value, TimeUnit unit);  // throws TimeError on a negative or (for non-dur units) fractional value

  /// Parses "<number><unit>", e.g. "2ep", "500ba", "0.5dur", "30min", "1.5h" (5400 s). Throws TimeError quoting the
  /// string.
  static Time parse(std::string_view text);

  double value() const noexcept { return value_; }
  TimeUnit unit() const noexcept { return unit_; }
  /// The integral value; for dur it throws TimeError.
  std::int64_t count() const;
  std::string str() const;  // "2ep", "0.5dur", "30min" (seconds in the largest of h, min, s that keeps them whole)

  // Comparisons of times in different units throw TimeError naming both.
  friend BATON_API bool operator<(const Time& a, const Time& b);
  friend BATON_API bool operator==(const Time& a, const Time& b);
  friend bool operator!=(const Time& a, const Time& b) { return !(a == b); }
  friend bool operator<=(const Time& a, const Time& b) { return !(b < a); }
  friend bool operator>(const Time& a, const Time& b) { return b < a; }
  friend bool operator>=(const Time& a, const Time& b) { return !(a < b); }

 private:
  double value_ = 0;
  TimeUnit unit_ = TimeUnit::epoch;
};

/// How far training has come. Counters are totals since the start of the run; *_in_epoch restart each epoch.
struct BATON_API Timestamp {
  std::int64_t epoch = 0;
  std::int64_t batch = 0;
  std::int64_t sample = 0;
  std::int64_t token = 0;
  std::int64_t iteration = 0;
  std::int64_t batch_in_epoch = 0;
  std::int64_t sample_in_epoch = 0;

  /// The counter for a unit; dur is not a counter and throws TimeError (use Progress below).
  std::int64_t get(TimeUnit unit) const;
  /// One training batch done, of `samples` samples counting every rank's.
  void advance_batch(std::int64_t samples);
  /// The epoch ends (its last batch is done): epoch and iteration count it, the *_in_epoch counters restart.
  void advance_epoch();
};

/// "ep 2 ba 300": how logs, stop reasons and checkpoint metadata name a moment of training (the epoch counter and
/// the total batch count), so every line of a run reads the same.
BATON_API std::string format_timestamp(const Timestamp& t);



/// A timestamp together with the run's length, so any Time (dur included) can be compared with "now".
struct BATON_API Progress {
  Timestamp now;
  Time max_duration;
  std::int64_t batches_per_epoch = 0;
  std::int64_t samples_per_epoch = 0;

  /// Fraction of max_duration elapsed, in [0, 1].
  double fraction() const;
  /// Whether time t has been reached (now >= t). dur is compared by fraction.
  bool reached(const Time& t) const;
  /// Converts t to a number of batches (ep, ba, sp, dur). Throws TimeError for tok/iter.
  std::int64_t to_batches(const Time& t) const;
};

}  // namespace baton
