#include "config/settings_table.h"

#include <type_traits>
#include <utility>

#include "sdk/words.h"

namespace baton::settings_table {
namespace {

using S = TrainerSettings;
using U = TimeUnit;

Rule at_least(std::int64_t min, std::string note = "") {
  Rule rule;
  rule.min = min;
  rule.note = std::move(note);
  return rule;
}

Rule between(std::int64_t min, std::int64_t max) {
  Rule rule;
  rule.min = min;
  rule.max = max;
  return rule;
}

Rule time_in(std::vector<TimeUnit> units, bool positive) {
  Rule rule;
  rule.units = std::move(units);
  rule.positive = positive;
  return rule;
}

Rule related(std::string (*relation)(const TrainerSettings&), Rule rule = {}) {
  rule.relation = relation;
  return rule;
}

bool is_cuda(const std::string& device) {
  return device == "cuda" || (device.rfind("cuda:", 0) == 0 && config_words::is_digits(device.substr(5)));
}

std::string device_form(const S& s) {
  return s.device == "cpu" || is_cuda(s.device) ? "" : "\"cpu\", \"cuda\" or \"cuda:N\"";
}

// Only on the CPU: a device of another form is the device's own problem, reported before this one.
std::string fp16_on_cuda(const S& s) {
  if (s.precision != Precision::amp_fp16 || s.device != "cpu") return "";
  return "fp32 or amp_bf16 on the device \"" + s.device +
         "\" (amp_fp16 needs a CUDA device; on the CPU use amp_bf16, which needs no loss scaling)";
}

// What a recorded step cannot hold, among the settings (trainer_setup.cpp checks the rest: the process group, the
// optimizer, the plugins, and a LibTorch without CUDA).
std::string graphs_recordable(const S& s) {
  if (!s.cuda_graphs) return "";
  const std::string why = "false";
  if (!is_cuda(s.device))
    return why + " on the device \"" + s.device + "\" (a CUDA graph records GPU work: set trainer.device = \"cuda\")";
  if (s.precision == Precision::amp_fp16)
    return why + " with precision \"amp_fp16\" (its loss scaler decides on the host, after each step, whether to "
                 "step: use amp_bf16)";
  if (s.microbatch_size > 0 && s.microbatch_size < s.batch_size)
    return why + " with microbatch_size " + std::to_string(s.microbatch_size) + " (the graph records one forward " +
           "and backward per batch: leave microbatch_size at 0)";
  if (s.sharding != Sharding::none)
    return why + " under distributed.sharding (the shards' collectives are not recorded: use sharding \"none\")";
  return "";
}

std::string allocator_name(const S& s) {
  return s.cpu_allocator == "caching" || s.cpu_allocator == "compact" || s.cpu_allocator == "system"
             ? ""
             : "\"caching\", \"compact\" or \"system\"";
}

std::string prefetch_covers_workers(const S& s) {
  if (s.workers <= 0 || s.prefetch <= 0 || s.prefetch >= s.workers) return "";
  return "at least workers (" + std::to_string(s.workers) + ": each worker fetches one of the batches ahead)";
}

// A stop for the time limit is continued from its checkpoint: a run that saves none would lose its progress.
std::string limit_saves(const S& s) {
  if (s.time_limit.value() == 0 || s.save_interval.value() != 0) return "";
  return "0 while checkpoints are off (checkpoint.save_interval = \"" + s.save_interval.str() +
         "\"): the run stops before the limit to continue from its checkpoint";
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = {
      {"trainer", "max_duration", "max_duration", &S::max_duration, time_in({U::epoch, U::batch, U::sample}, true)},
      {"trainer", "eval_interval", "eval_interval", &S::eval_interval,
       time_in({U::epoch, U::batch, U::duration}, false)},
      {"data", "batch_size", "batch_size", &S::batch_size, at_least(1)},
      {"data", "eval_batch_size", "eval_batch_size", &S::eval_batch_size, at_least(1)},
      {"data", "workers", "workers", &S::workers, between(0, kMaxWorkers)},
      {"data", "prefetch", "prefetch", &S::prefetch,
       related(prefetch_covers_workers, at_least(0, " (0: two per worker)"))},
      {"run", "seed", "seed", &S::seed, {}},
      {"trainer", "threads", "threads", &S::threads, at_least(0)},
      {"trainer", "device", "device", &S::device, related(device_form)},
      {"trainer", "cpu_allocator", "cpu_allocator", &S::cpu_allocator, related(allocator_name)},
      {"trainer", "precision", "precision", &S::precision, related(fp16_on_cuda)},
      {"trainer", "microbatch_size", "microbatch_size", &S::microbatch_size, at_least(0)},
      {"trainer", "cuda_graphs", "cuda_graphs", &S::cuda_graphs, related(graphs_recordable)},
      {"trainer", "log_interval", "log_interval", &S::log_interval, time_in({U::batch}, true)},
      {"trainer", "progress", "progress", &S::progress, {}},
      {"trainer", "allow_nonfinite", "allow_nonfinite", &S::allow_nonfinite, {}},
      {"trainer", "time_limit", "time_limit", &S::time_limit, related(limit_saves, time_in({U::second}, false))},
      {"checkpoint", "save_interval", "save_interval", &S::save_interval,
       time_in({U::epoch, U::batch, U::second}, false)},
      {"checkpoint", "keep_last", "keep_last", &S::keep_last, at_least(0)},
      // "" is the run folder's checkpoints/ (the config fills it in), so a file may not say "" itself.
      {"checkpoint", "dir", "checkpoint_dir", &S::checkpoint_dir, {}, true},
      {"distributed", "sharding", "sharding", &S::sharding, {}},
  };
  return table;
}

std::string value_text(const TrainerSettings& s, const Setting& setting) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto& value = s.*member;
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, bool>) return value ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>) return "\"" + value + "\"";
        else if constexpr (std::is_same_v<T, Time>) return value.str();
        else if constexpr (std::is_same_v<T, Precision>) return precision_name(value);
        else if constexpr (std::is_same_v<T, Sharding>) return sharding_name(value);
        else return std::to_string(value);
      },
      setting.member);
}

}  // namespace baton::settings_table
