#pragma once
// The ema plugin's configuration: every key of its [[plugins]] table, parsed and validated once when the plugin is
// created, so a bad value fails before training starts with the file, line and key.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "baton/ema.h"
#include "baton/plugin_config.h"
#include "baton/time.h"

namespace baton::ema_plugin {

enum class Warmup { none, tf, power };
enum class EvalMode { ema, raw, both };

struct SelectSettings {
  bool enabled = false;
  std::string metric;    // e.g. "eval/accuracy"
  std::optional<bool> maximize;  // mode = "max" / "min"; unset: the metric's own direction (State::higher_is_better)
  std::int64_t keep = 1;
  PluginConfig table;    // the select table, so a metric found missing later is reported at its line
};

/// posthoc = { sigma_rels = [...], snapshot_every = "1ep", dtype = "float32" } (docs/posthoc.md).
struct PosthocSettings {
  bool enabled = false;
  std::vector<double> sigma_rels;                 // at least two, distinct, each in (0, sqrt(1/12)]
  Time snapshot_every = Time(1, TimeUnit::epoch);  // ba or ep, positive
  bool float32 = false;                           // dtype = "float32" ("auto": the weights' dtype)
};

struct EmaSettings {
  std::optional<Time> half_life;   // ba or ep, integral
  std::optional<double> smoothing; // per update, in [0, 1]
  Time update_interval = Time(1, TimeUnit::batch);  // ba or ep, > 0, same unit as half_life
  Time ema_start = Time(0.0, TimeUnit::duration);   // dur, ba or ep
  Warmup warmup = Warmup::none;
  double inv_gamma = 1.0;
  double power = 2.0 / 3.0;
  double min_smoothing = 0.0;
  EmaOptions ema;                  // buffers, exclude, float32, device ("" or "cpu"); smoothing set below
  std::string module;              // a named sub-module to average alone ("generator"); empty: the whole model
  EvalMode eval = EvalMode::ema;
  std::optional<bool> sharded;     // unset: sharded when the run has more than one rank
  SelectSettings select;
  PosthocSettings posthoc;

  /// s per update: the configured smoothing, or 2^(-interval / half_life).
  double base_smoothing() const;
  /// The half life in batches (batches_per_epoch converts ep); infinite when s = 1.
  double half_life_batches(std::int64_t batches_per_epoch) const;
  /// The line logged at fit start: the effective smoothing, the interval and the half life in batches.
  std::string describe(std::int64_t batches_per_epoch) const;
};

/// Reads and validates every key; throws ConfigError (file, line, key, what was expected).
EmaSettings parse_settings(const PluginConfig& config);

std::string warmup_name(Warmup warmup);

}  // namespace baton::ema_plugin
