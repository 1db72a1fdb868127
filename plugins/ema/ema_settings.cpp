#include "ema_settings.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "baton/posthoc.h"

namespace baton::ema_plugin {
namespace {

std::string in_quotes(const std::string& text) { return "\"" + text + "\""; }

// One of a fixed set of strings; the error lists them.
std::string choice(const PluginConfig& config, const char* key, const std::vector<std::string>& allowed,
                   const std::string& fallback) {
  std::string list;
  for (const auto& option : allowed) list += (list.empty() ? "" : ", ") + in_quotes(option);
  if (!config.has(key) && fallback.empty()) config.fail(key, "missing: expected one of " + list);
  std::string value = config.get_or<std::string>(key, fallback);
  for (const auto& option : allowed)
    if (option == value) return value;
  config.fail(key, "expected one of " + list + ", got " + in_quotes(value));
}

bool counts_batches_or_epochs(const Time& t) {
  return t.unit() == TimeUnit::batch || t.unit() == TimeUnit::epoch;
}

void parse_averaging(const PluginConfig& config, EmaSettings& s) {
  bool has_half_life = config.has("half_life");
  bool has_smoothing = config.has("smoothing");
  if (has_half_life == has_smoothing)
    config.fail(has_half_life ? "smoothing" : "half_life",
                has_half_life ? "give either half_life or smoothing, not both"
                              : "give exactly one of half_life (e.g. \"1000ba\") or smoothing (e.g. 0.999)");
  if (has_half_life) {
    Time half_life = config.get<Time>("half_life");
    if (!counts_batches_or_epochs(half_life))
      config.fail("half_life", "expected a time in ba or ep (e.g. \"1000ba\"), got " + in_quotes(half_life.str()));
    s.half_life = half_life;
  } else {
    double smoothing = config.get<double>("smoothing");
    if (!(smoothing >= 0.0 && smoothing <= 1.0))
      config.fail("smoothing", "expected a number in [0, 1] (the weight kept per update), got " +
                                   std::to_string(smoothing));
    s.smoothing = smoothing;
  }
  // Composer crashes when smoothing comes without an interval; here the interval defaults to one of the half
  // life's unit, or one batch.
  TimeUnit default_unit = s.half_life ? s.half_life->unit() : TimeUnit::batch;
  s.update_interval = config.get_or<Time>("update_interval", Time(1, default_unit));
  if (!counts_batches_or_epochs(s.update_interval))
    config.fail("update_interval",
                "expected a time in ba or ep (e.g. \"1ba\"), got " + in_quotes(s.update_interval.str()));
  if (s.update_interval.count() <= 0)
    config.fail("update_interval", "expected a positive interval, got " + in_quotes(s.update_interval.str()));
  if (s.half_life && s.half_life->unit() != s.update_interval.unit())
    config.fail("update_interval", "must be in the same unit as half_life (" + in_quotes(s.half_life->str()) +
                                       "), got " + in_quotes(s.update_interval.str()));
}

void parse_start(const PluginConfig& config, EmaSettings& s) {
  s.ema_start = config.get_or<Time>("ema_start", Time(0.0, TimeUnit::duration));
  TimeUnit unit = s.ema_start.unit();
  if (unit != TimeUnit::duration && unit != TimeUnit::batch && unit != TimeUnit::epoch)
    config.fail("ema_start", "expected a time in dur, ba or ep (e.g. \"0.1dur\"), got " + in_quotes(s.ema_start.str()));
  if (unit == TimeUnit::duration && s.ema_start.value() > 1.0)
    config.fail("ema_start", "a fraction of the run must lie in [0, 1], got " + in_quotes(s.ema_start.str()));
}

double positive_number(const PluginConfig& config, const char* key, double fallback) {
  double value = config.get_or<double>(key, fallback);
  if (!(value > 0.0) || std::isinf(value))
    config.fail(key, "expected a positive number, got " + std::to_string(value));
  return value;
}

void parse_warmup(const PluginConfig& config, EmaSettings& s) {
  std::string warmup = choice(config, "warmup", {"none", "tf", "power"}, "none");
  s.warmup = warmup == "tf" ? Warmup::tf : warmup == "power" ? Warmup::power : Warmup::none;
  // The power schedule's knobs mean nothing to the others: a stray one is a misunderstanding worth reporting.
  if (s.warmup != Warmup::power)
    for (const char* key : {"inv_gamma", "power", "min_smoothing"})
      if (config.has(key)) config.fail(key, "only used with warmup = \"power\" (warmup is " + in_quotes(warmup) + ")");
  s.inv_gamma = positive_number(config, "inv_gamma", 1.0);
  s.power = positive_number(config, "power", 2.0 / 3.0);
  s.min_smoothing = config.get_or<double>("min_smoothing", 0.0);
  if (!(s.min_smoothing >= 0.0 && s.min_smoothing <= 1.0))
    config.fail("min_smoothing", "expected a number in [0, 1], got " + std::to_string(s.min_smoothing));
}

void parse_storage(const PluginConfig& config, EmaSettings& s) {
  s.ema.buffers = choice(config, "buffers", {"average", "copy"}, "average") == "copy" ? EmaBuffers::copy
                                                                                      : EmaBuffers::average;
  s.module = config.get_or<std::string>("module", "");
  s.ema.exclude = config.get_or<std::vector<std::string>>("exclude", {});
  for (const auto& pattern : s.ema.exclude)
    if (pattern.empty()) config.fail("exclude", "an empty pattern matches nothing");
  s.ema.float32 = choice(config, "dtype", {"auto", "float32"}, "auto") == "float32";
  s.ema.device = choice(config, "device", {"auto", "cpu"}, "auto") == "cpu" ? "cpu" : "";
  if (config.has("sharded")) s.sharded = config.get<bool>("sharded");
  std::string eval = choice(config, "eval", {"ema", "raw", "both"}, "ema");
  s.eval = eval == "raw" ? EvalMode::raw : eval == "both" ? EvalMode::both : EvalMode::ema;
}

void parse_select(const PluginConfig& config, EmaSettings& s) {
  if (!config.has("select")) return;
  PluginConfig table = config.get<PluginConfig>("select");
  SelectSettings& select = s.select;
  select.enabled = true;
  select.table = table;
  select.metric = table.get<std::string>("metric");
  if (select.metric.empty()) table.fail("metric", "expected a metric name such as \"eval/accuracy\"");
  if (table.has("mode")) select.maximize = choice(table, "mode", {"min", "max"}, "") == "max";
  select.keep = table.get_or<std::int64_t>("keep", 1);
  if (select.keep < 1) table.fail("keep", "expected at least 1 checkpoint to keep, got " + std::to_string(select.keep));
}

std::string format_number(double value, int precision);

void parse_posthoc(const PluginConfig& config, EmaSettings& s) {
  if (!config.has("posthoc")) return;
  PluginConfig table = config.get<PluginConfig>("posthoc");
  PosthocSettings& posthoc = s.posthoc;
  posthoc.enabled = true;
  posthoc.sigma_rels = table.get<std::vector<double>>("sigma_rels");
  if (posthoc.sigma_rels.size() < 2)
    table.fail("sigma_rels", "expected at least two relative widths (e.g. [0.05, 0.10]) to synthesise others "
                             "from, got " + std::to_string(posthoc.sigma_rels.size()));
  const double widest = posthoc::max_sigma_rel();
  for (std::size_t i = 0; i < posthoc.sigma_rels.size(); ++i) {
    double sigma = posthoc.sigma_rels[i];
    if (!(sigma > 0 && sigma <= widest))
      table.fail("sigma_rels", "each sigma_rel must lie in (0, " + format_number(widest, 4) +
                                   "] (0.2887 averages all weights so far uniformly), got " + format_number(sigma, 6));
    for (std::size_t j = 0; j < i; ++j)
      if (posthoc.sigma_rels[j] == sigma)
        table.fail("sigma_rels", "sigma_rel " + format_number(sigma, 6) + " is listed twice");
  }
  posthoc.snapshot_every = table.get_time_or("snapshot_every", Time(1, TimeUnit::epoch),
                                             {TimeUnit::batch, TimeUnit::epoch});
  if (posthoc.snapshot_every.count() <= 0)
    table.fail("snapshot_every", "expected a positive interval, got " + in_quotes(posthoc.snapshot_every.str()));
  posthoc.float32 = choice(table, "dtype", {"auto", "float32"}, "auto") == "float32";
}

std::string format_number(double value, int precision) {
  std::ostringstream out;
  out.precision(precision);
  out << value;
  return out.str();
}

}  // namespace

double EmaSettings::base_smoothing() const {
  if (smoothing) return *smoothing;
  return smoothing_from_half_life(static_cast<double>(half_life->count()),
                                  static_cast<double>(update_interval.count()));
}

double EmaSettings::half_life_batches(std::int64_t batches_per_epoch) const {
  double per_unit = update_interval.unit() == TimeUnit::epoch ? static_cast<double>(batches_per_epoch) : 1.0;
  if (half_life) return static_cast<double>(half_life->count()) * per_unit;
  if (*smoothing >= 1.0) return std::numeric_limits<double>::infinity();
  return half_life_from_smoothing(*smoothing, static_cast<double>(update_interval.count())) * per_unit;
}

std::string EmaSettings::describe(std::int64_t batches_per_epoch) const {
  double s = base_smoothing();
  double half = half_life_batches(batches_per_epoch);
  std::string line = "ema: smoothing " + format_number(s, 6) + " per update, one update every " +
                     update_interval.str() + ", so the half life is ";
  if (std::isinf(half))
    line += "infinite (smoothing 1 keeps the weights of ema_start)";
  else if (half == 0)
    line += "0 batches (no averaging: the EMA equals the weights)";
  else
    line += format_number(half, 6) + " batches";
  line += "; starts at " + ema_start.str() + ", warmup " + warmup_name(warmup);
  return line;
}

std::string warmup_name(Warmup warmup) {
  switch (warmup) {
    case Warmup::tf: return "tf";
    case Warmup::power: return "power";
    case Warmup::none: break;
  }
  return "none";
}

EmaSettings parse_settings(const PluginConfig& config) {
  EmaSettings s;
  parse_averaging(config, s);
  parse_start(config, s);
  parse_warmup(config, s);
  parse_storage(config, s);
  parse_select(config, s);
  parse_posthoc(config, s);
  s.ema.smoothing = s.base_smoothing();
  return s;
}

}  // namespace baton::ema_plugin
