#include "baton/settings.h"

#include <algorithm>

#include "config/words.h"

namespace baton {
namespace {

using config_words::is_digits;
using config_words::units_text;

// The problems of one run's settings, collected in the members' order.
class Problems {
 public:
  void add(std::string key, std::string option, std::string expected, std::string got) {
    list_.push_back(SettingProblem{std::move(key), std::move(option), std::move(expected), std::move(got)});
  }

  void integer_at_least(const char* key, const char* option, std::int64_t value, std::int64_t lo,
                        const std::string& note = "") {
    if (value < lo) add(key, option, "an integer >= " + std::to_string(lo) + note, std::to_string(value));
  }

  // A time in one of `units`; `positive`: zero refused too (a duration, a logging interval).
  void time_in(const char* key, const char* option, const Time& time, const std::vector<TimeUnit>& units,
               bool positive) {
    if (std::find(units.begin(), units.end(), time.unit()) == units.end())
      add(key, option, "a time in " + units_text(units), time.str());
    else if (positive && time.value() <= 0)
      add(key, option, "a time > 0", time.str());
  }

  std::vector<SettingProblem> take() { return std::move(list_); }

 private:
  std::vector<SettingProblem> list_;
};

}  // namespace

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::amp_bf16: return "amp_bf16";
    case Precision::amp_fp16: return "amp_fp16";
    case Precision::fp32: break;
  }
  return "fp32";
}

std::optional<Precision> precision_from_name(std::string_view name) {
  for (Precision p : {Precision::fp32, Precision::amp_bf16, Precision::amp_fp16})
    if (name == precision_name(p)) return p;
  return std::nullopt;
}

std::vector<SettingProblem> setting_problems(const TrainerSettings& s) {
  using U = TimeUnit;
  Problems problems;
  problems.time_in("trainer.max_duration", "max_duration", s.max_duration, {U::epoch, U::batch, U::sample}, true);
  problems.time_in("trainer.eval_interval", "eval_interval", s.eval_interval, {U::epoch, U::batch, U::duration},
                   false);
  problems.integer_at_least("data.batch_size", "batch_size", s.batch_size, 1);
  problems.integer_at_least("data.eval_batch_size", "eval_batch_size", s.eval_batch_size, 1);
  if (s.workers < 0 || s.workers > kMaxWorkers)
    problems.add("data.workers", "workers", "an integer in [0, " + std::to_string(kMaxWorkers) + "]",
                 std::to_string(s.workers));
  problems.integer_at_least("data.prefetch", "prefetch", s.prefetch, 0, " (0: two per worker)");
  if (s.workers > 0 && s.prefetch > 0 && s.prefetch < s.workers)
    problems.add("data.prefetch", "prefetch",
                 "at least workers (" + std::to_string(s.workers) + ": each worker fetches one of the batches ahead)",
                 std::to_string(s.prefetch));
  problems.integer_at_least("trainer.threads", "threads", s.threads, 0);
  const bool cuda = s.device == "cuda" || (s.device.rfind("cuda:", 0) == 0 && is_digits(s.device.substr(5)));
  if (s.device != "cpu" && !cuda)
    problems.add("trainer.device", "device", "\"cpu\", \"cuda\" or \"cuda:N\"", "\"" + s.device + "\"");
  else if (s.precision == Precision::amp_fp16 && !cuda)
    problems.add("trainer.precision", "precision",
                 "fp32 or amp_bf16 on the device \"" + s.device +
                     "\" (amp_fp16 needs a CUDA device; on the CPU use amp_bf16, which needs no loss scaling)",
                 precision_name(s.precision));
  problems.integer_at_least("trainer.microbatch_size", "microbatch_size", s.microbatch_size, 0);
  problems.time_in("trainer.log_interval", "log_interval", s.log_interval, {U::batch}, true);
  problems.time_in("checkpoint.save_interval", "save_interval", s.save_interval, {U::epoch, U::batch}, false);
  problems.integer_at_least("checkpoint.keep_last", "keep_last", s.keep_last, 0);
  return problems.take();
}

}  // namespace baton
