#pragma once
// Training time, as in Composer: "<number><unit>" with units ep (epochs), ba (batches), sp (samples),
// tok (tokens), iter (iterations) and dur (fraction of the whole run). Values are integral except for dur.
// No LibTorch here: part of the plugin SDK.
#include <cstdint>
#include <string>
#include <string_view>

#include "baton/export.h"

namespace baton {

enum class TimeUnit : unsigned char { epoch, batch, sample, token, iteration, duration };

/// "ep", "ba", "sp", "tok", "iter", "dur".
BATON_API std::string_view unit_suffix(TimeUnit unit) noexcept;

class BATON_API Time {
 public:
  Time() = default;
  Time(double value, TimeUnit unit);  // throws TimeError on a negative or (for non-dur units) fractional value

  /// Parses "<number><unit>", e.g. "2ep", "500ba", "0.5dur". Throws TimeError quoting the string.
  static Time parse(std::string_view text);

  double value() const noexcept { return value_; }
  TimeUnit unit() const noexcept { return unit_; }
  /// The integral value; for dur it throws TimeError.
  std::int64_t count() const;
  std::string str() const;  // "2ep", "0.5dur"

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

/// A number for people to read, with at most `significant` significant digits, as printf's %g writes it:
/// format_number(0.99930709) is "0.999307", format_number(1000) "1000", format_number(1e-5) "1e-05", and
/// format_number(0.28867513, 4) "0.2887". -0 reads "0" (a sign on nothing looks like an error); nan reads "nan".
BATON_API std::string format_number(double value, int significant = 6);

/// A number with exactly `decimals` digits after the point, as printf's %.*f writes it: format_decimals(2.302585,
/// 4) is "2.3026", format_decimals(12.0, 1) "12.0". For columns of values (losses, seconds) that line up.
BATON_API std::string format_decimals(double value, int decimals);

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
