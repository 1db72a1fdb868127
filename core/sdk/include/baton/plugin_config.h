#pragma once
// A plugin's own keys from its [[plugins]] table, with types checked. Every error names the plugin, the key, the
// file and the line. After the plugin is created, any key it never read is reported as an unknown key, so a typo
// in a config never passes silently.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "baton/error.h"
#include "baton/export.h"
#include "baton/time.h"

namespace baton {

/// An interval a number must lie in, for get_number / get_int: "expected a number > 0, got ...".
struct BATON_API Range {
  double lo = -1e308;
  double hi = 1e308;
  bool lo_open = false;
  bool hi_open = false;

  static Range at_least(double lo) { return Range{lo, 1e308, false, false}; }
  static Range above(double lo) { return Range{lo, 1e308, true, false}; }
  static Range closed(double lo, double hi) { return Range{lo, hi, false, false}; }
  /// [lo, hi)
  static Range half_open(double lo, double hi) { return Range{lo, hi, false, true}; }
  bool contains(double value) const;
  /// ">= 1", "> 0", "in [0, 1)"
  std::string text() const;
};

/// Whether a time key may be zero. Most intervals may not: "every 0 batches" has no meaning, and code that takes
/// a count modulo it divides by zero.
enum class TimeZero { allowed, rejected };

class BATON_API PluginConfig {
 public:
  /// An empty configuration (for plugins created from code).
  PluginConfig();
  ~PluginConfig();
  PluginConfig(const PluginConfig&);
  PluginConfig& operator=(const PluginConfig&);

  /// Parses a TOML table text, e.g. "threshold = 3" (handy in tests and for plugins created from code).
  static PluginConfig from_toml(std::string_view toml_text, std::string plugin_name = "plugin",
                                std::string file = "<string>");

  const std::string& plugin_name() const;
  /// A copy of this view whose errors name another plugin (with what has been read so far). The loader uses it
  /// for a plugin given by `path`, so its errors read "plugins.<name from its info>.<key>", not the path.
  PluginConfig renamed(std::string plugin_name) const;
  bool has(std::string_view key) const;
  /// Supported T: bool, int, std::int64_t, double (an integer is accepted), std::string, Time (a time string),
  /// std::vector<std::string>, std::vector<double>, std::vector<std::int64_t>, PluginConfig (an inline table).
  /// Throws ConfigError when the key is missing or holds another type.
  template <class T>
  T get(std::string_view key) const;
  template <class T>
  T get_or(std::string_view key, T fallback) const {
    return has(key) ? get<T>(key) : fallback;
  }
  /// get_or("mode", "fast") reads a string (the template would take T = const char*, which is not supported).
  std::string get_or(std::string_view key, const char* fallback) const {
    return has(key) ? get<std::string>(key) : std::string(fallback);
  }
  /// A time string in one of `units`, e.g. get_time("every", {TimeUnit::batch, TimeUnit::epoch}). Any other unit
  /// is a ConfigError at the key: "plugins.<plugin>.every: expected a time in ba or ep, got string \"2sp\"".
  /// An empty list accepts every unit, as get<Time> does.
  Time get_time(std::string_view key, const std::vector<TimeUnit>& units) const;
  /// The same, or `fallback` when the key is absent (the fallback's unit is not checked).
  Time get_time_or(std::string_view key, Time fallback, const std::vector<TimeUnit>& units) const {
    return has(key) ? get_time(key, units) : fallback;
  }
  /// get_time that, with TimeZero::rejected, also refuses a zero time: "plugins.<plugin>.every: expected a time
  /// > 0, got string \"0ba\"".
  Time get_time(std::string_view key, const std::vector<TimeUnit>& units, TimeZero zero) const;
  /// The same, or `fallback` when the key is absent (the fallback is not checked).
  Time get_time_or(std::string_view key, Time fallback, const std::vector<TimeUnit>& units, TimeZero zero) const {
    return has(key) ? get_time(key, units, zero) : fallback;
  }
  /// get_time whose errors also say what the key is for, after what was expected: "plugins.ema.update_interval:
  /// expected a time > 0 (the interval between updates), got string \"0ba\"". A plugin gives a reason instead
  /// of writing the check again to word its message.
  Time get_time(std::string_view key, const std::vector<TimeUnit>& units, TimeZero zero,
                std::string_view meaning) const;
  Time get_time_or(std::string_view key, Time fallback, const std::vector<TimeUnit>& units, TimeZero zero,
                   std::string_view meaning) const {
    return has(key) ? get_time(key, units, zero, meaning) : fallback;
  }
  /// A number (an integer is accepted) in `range`, else a ConfigError at the key: "expected a number > 0, got
  /// float -0.5". Missing: an error, or the fallback for the _or form (not checked).
  double get_number(std::string_view key, Range range) const;
  double get_number_or(std::string_view key, double fallback, Range range) const {
    return has(key) ? get_number(key, range) : fallback;
  }
  /// With what the number means: "expected a number in [0, 1] (the weight kept per update), got float 1.5".
  double get_number(std::string_view key, Range range, std::string_view meaning) const;
  double get_number_or(std::string_view key, double fallback, Range range, std::string_view meaning) const {
    return has(key) ? get_number(key, range, meaning) : fallback;
  }
  /// An integer in `range`.
  std::int64_t get_int(std::string_view key, Range range) const;
  std::int64_t get_int_or(std::string_view key, std::int64_t fallback, Range range) const {
    return has(key) ? get_int(key, range) : fallback;
  }
  /// With what the integer means: "expected an integer >= 1 (the checkpoints to keep), got integer 0".
  std::int64_t get_int(std::string_view key, Range range, std::string_view meaning) const;
  std::int64_t get_int_or(std::string_view key, std::int64_t fallback, Range range,
                          std::string_view meaning) const {
    return has(key) ? get_int(key, range, meaning) : fallback;
  }
  /// A string that is one of `choices`: "expected one of \"fp32\", \"amp_bf16\", got string \"fp8\"". A
  /// missing key lists them too: "expected one of \"min\", \"max\", got nothing (the key is missing)".
  std::string get_choice(std::string_view key, const std::vector<std::string>& choices) const;
  std::string get_choice_or(std::string_view key, const std::string& fallback,
                            const std::vector<std::string>& choices) const {
    return has(key) ? get_choice(key, choices) : fallback;
  }
  /// A non-empty string.
  std::string get_text(std::string_view key) const;
  std::string get_text_or(std::string_view key, const std::string& fallback) const {
    return has(key) ? get_text(key) : fallback;
  }

  /// A list of named entries, e.g. metrics = ["accuracy", { name = "top_k", k = 3 }]: each element is a string (a
  /// name alone) or an inline table with a `name`. Each comes back as its name and a view of its table (empty for
  /// a string), whose errors name "<key>[i].<key>". Missing: an empty list.
  std::vector<std::pair<std::string, PluginConfig>> get_entries(std::string_view key) const;

  /// Keys in file order.
  std::vector<std::string> keys() const;
  /// Keys (dotted paths, nested tables included) that get/has never touched.
  std::vector<std::string> unread_keys() const;
  /// Throws ConfigError for the first unread key ("unknown key ... for plugin ...").
  void reject_unread() const;
  /// Where key is (or, when absent, where the plugin's table is).
  SourceLocation where(std::string_view key) const;
  /// Throws ConfigError at key's location: "<plugin>.<key>: <message>".
  [[noreturn]] void fail(std::string_view key, std::string_view message) const;
  /// Throws ConfigError at key's location saying what its value should have been, and what it is:
  /// "<plugin>.<key>: expected <expected>, got integer 0". For checks beyond the getters' (two keys together).
  [[noreturn]] void refuse(std::string_view key, std::string_view expected) const;
  /// The key as errors name it: "plugins.ema.half_life", or "optimizer.lr" for a section's view.
  std::string full_key(std::string_view key) const;
  /// A view of the same table whose unknown-key errors name `owner` ("optimizer 'sgd'", "dataset 'csv'"); what
  /// was read is shared with this view. Component factories get such a view of their section.
  PluginConfig owned_by(std::string owner) const;

  struct Impl;
  explicit PluginConfig(std::shared_ptr<Impl> impl);

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace baton
