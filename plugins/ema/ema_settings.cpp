#include "ema_settings.h"

#include <cmath>
#include <limits>
#include <vector>

#include "baton/posthoc.h"

namespace baton::ema_plugin {
namespace {

// Each key is read with PluginConfig's getters, which check its type, unit and range and word the error; what is
// left here are the rules between keys and within lists, which no getter can know.

const std::vector<TimeUnit> kBatchesOrEpochs = {TimeUnit::batch, TimeUnit::epoch};

std::string in_quotes(const std::string& text) { return "\"" + text + "\""; }

void parse_averaging(const PluginConfig& config, EmaSettings& s) {
  bool has_half_life = config.has("half_life");
  bool has_smoothing = config.has("smoothing");
  if (has_half_life == has_smoothing)
    config.fail(has_half_life ? "smoothing" : "half_life",
                has_half_life ? "give either half_life or smoothing, not both"
                              : "give exactly one of half_life (e.g. \"1000ba\") or smoothing (e.g. 0.999)");
  if (has_half_life)
    s.half_life = config.get_time("half_life", kBatchesOrEpochs, TimeZero::allowed,
                                  "the time after which a weight counts half as much, e.g. \"1000ba\"");
  else
    s.smoothing = config.get_number("smoothing", Range::closed(0, 1), "the weight kept per update");
  // Composer crashes when smoothing comes without an interval; here the interval defaults to one of the half
  // life's unit, or one batch.
  TimeUnit default_unit = s.half_life ? s.half_life->unit() : TimeUnit::batch;
  s.update_interval = config.get_time_or("update_interval", Time(1, default_unit), kBatchesOrEpochs,
                                         TimeZero::rejected, "a positive number of batches or epochs between updates");
  if (s.half_life && s.half_life->unit() != s.update_interval.unit())
    config.fail("update_interval", "must be in the same unit as half_life (" + in_quotes(s.half_life->str()) +
                                       "), got " + in_quotes(s.update_interval.str()));
}

void parse_warmup(const PluginConfig& config, EmaSettings& s) {
  std::string warmup = config.get_choice_or("warmup", "none", {"none", "tf", "power"});
  s.warmup = warmup == "tf" ? Warmup::tf : warmup == "power" ? Warmup::power : Warmup::none;
  // The power schedule's knobs mean nothing to the others: a stray one is a misunderstanding worth reporting.
  if (s.warmup != Warmup::power)
    for (const char* key : {"inv_gamma", "power", "min_smoothing"})
      if (config.has(key)) config.fail(key, "only used with warmup = \"power\" (warmup is " + in_quotes(warmup) + ")");
  s.inv_gamma = config.get_number_or("inv_gamma", 1.0, Range::above(0), "the power warmup's positive scale in updates");
  s.power = config.get_number_or("power", 2.0 / 3.0, Range::above(0), "the power warmup's positive exponent");
  s.min_smoothing =
      config.get_number_or("min_smoothing", 0.0, Range::closed(0, 1), "the power warmup's least smoothing");
}

void parse_storage(const PluginConfig& config, EmaSettings& s) {
  const bool copy_buffers = config.get_choice_or("buffers", "average", {"average", "copy"}) == "copy";
  s.ema.buffers = copy_buffers ? EmaBuffers::copy : EmaBuffers::average;
  s.module = config.get_or("module", "");
  s.ema.exclude = config.get_or<std::vector<std::string>>("exclude", {});
  for (const auto& pattern : s.ema.exclude)
    if (pattern.empty()) config.fail("exclude", "an empty pattern matches nothing");
  s.ema.float32 = config.get_choice_or("dtype", "auto", {"auto", "float32"}) == "float32";
  s.ema.device = config.get_choice_or("device", "auto", {"auto", "cpu"}) == "cpu" ? "cpu" : "";
  if (config.has("sharded")) s.sharded = config.get<bool>("sharded");
  std::string eval = config.get_choice_or("eval", "ema", {"ema", "raw", "both"});
  s.eval = eval == "raw" ? EvalMode::raw : eval == "both" ? EvalMode::both : EvalMode::ema;
}

void parse_select(const PluginConfig& config, EmaSettings& s) {
  if (!config.has("select")) return;
  PluginConfig table = config.get<PluginConfig>("select");
  SelectSettings& select = s.select;
  select.enabled = true;
  select.table = table;
  select.metric = table.get_text("metric");
  if (table.has("mode")) select.maximize = table.get_choice("mode", {"min", "max"}) == "max";
  select.keep = table.get_int_or("keep", 1, Range::at_least(1), "at least 1 checkpoint to keep");
}

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
                                   "] (0.2887 averages all weights so far uniformly), got " + format_number(sigma));
    for (std::size_t j = 0; j < i; ++j)
      if (posthoc.sigma_rels[j] == sigma)
        table.fail("sigma_rels", "sigma_rel " + format_number(sigma) + " is listed twice");
  }
  posthoc.snapshot_every =
      table.get_time_or("snapshot_every", Time(1, TimeUnit::epoch), kBatchesOrEpochs, TimeZero::rejected);
  posthoc.float32 = table.get_choice_or("dtype", "auto", {"auto", "float32"}) == "float32";
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
  std::string line = "ema: smoothing " + format_number(s) + " per update, one update every " +
                     update_interval.str() + ", so the half life is ";
  if (std::isinf(half))
    line += "infinite (smoothing 1 keeps the weights of ema_start)";
  else if (half == 0)
    line += "0 batches (no averaging: the EMA equals the weights)";
  else
    line += format_number(half) + " batches";
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
  s.ema_start = config.get_time_or("ema_start", Time(0.0, TimeUnit::duration),
                                   {TimeUnit::duration, TimeUnit::batch, TimeUnit::epoch}, TimeZero::allowed,
                                   "when averaging starts: a fraction of the run in [0, 1], a batch or an epoch");
  parse_warmup(config, s);
  parse_storage(config, s);
  parse_select(config, s);
  parse_posthoc(config, s);
  s.ema.smoothing = s.base_smoothing();
  return s;
}

}  // namespace baton::ema_plugin
