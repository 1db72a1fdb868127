#include "trainer/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include <ATen/ops/argmax.h>
#include <ATen/ops/cat.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "baton/communicator.h"
#include "baton/components.h"
#include "engine/engine.h"
#include "logging/metrics_history.h"
#include "logging/run_logger.h"
#include "sdk/step_generator.h"
#include "baton/time.h"
#include "trainer/module_mode.h"
#include "trainer/precision.h"
#include "trainer/step_errors.h"

namespace baton {

PrefetchOptions loader_options(const TrainerSettings& settings, c10::Device device) {
  PrefetchOptions out;
  out.workers = static_cast<int>(settings.workers);
  out.prefetch = static_cast<int>(settings.prefetch_batches());
  out.device = device;
  return out;
}

Evaluator::Evaluator(const RunContext& run, const Model& model, const Dataset& data, LossFunction loss,
                     std::vector<NamedMetric> metrics, std::string set, std::vector<EvalRecord>& history)
    : state_(run.state),
      engine_(run.engine),
      logger_(run.logger),
      options_(run.options),
      precision_(run.precision),
      device_(run.device),
      model_(model),
      data_(data),
      loss_(std::move(loss)),
      metrics_(metrics.empty() ? default_metrics(data.spec()) : std::move(metrics)),
      set_(std::move(set)),
      history_(history) {}

std::string Evaluator::key(const std::string& label, const std::string& name) const {
  return set_.empty() ? label + "/" + name : label + "/" + set_ + "/" + name;
}

bool Evaluator::logs_loss() const { return static_cast<bool>(loss_) && !model_.has_eval_forward(); }

std::vector<std::string> Evaluator::metric_names(const std::vector<std::string>& labels) const {
  std::vector<std::string> names;
  for (auto& [name, higher_is_better] : metric_directions(labels)) names.push_back(std::move(name));
  return names;
}

std::vector<std::pair<std::string, bool>> Evaluator::metric_directions(const std::vector<std::string>& labels) const {
  std::vector<std::pair<std::string, bool>> out;
  if (!has_data()) return out;
  for (const auto& label : labels) {
    if (logs_loss()) out.emplace_back(key(label, "loss"), false);
    for (const auto& m : metrics_) out.emplace_back(key(label, m.name), m.metric->higher_is_better());
  }
  return out;
}

bool Evaluator::owns(const std::string& metric) const {
  // Pass labels are "eval" and what plugins add ("eval_raw"): one path segment, then the set's, then the metric.
  if (metric.rfind("eval", 0) != 0) return false;
  const std::size_t first = metric.find('/');
  if (first == std::string::npos) return false;
  const std::string rest = metric.substr(first + 1);
  if (set_.empty()) return rest.find('/') == std::string::npos;
  return rest.rfind(set_ + "/", 0) == 0 && rest.find('/', set_.size() + 1) == std::string::npos;
}

Outputs join_outputs(const std::vector<Outputs>& parts) {
  Outputs joined;
  if (parts.empty()) return joined;
  for (const auto& [name, first] : parts.front()) {
    if (first.dim() == 0) continue;
    std::vector<at::Tensor> pieces;
    for (const auto& part : parts) pieces.push_back(part[name]);
    joined.set(name, at::cat(pieces));
  }
  return joined;
}

std::string default_loss_name(const DataSpec& data) { return data.classification() ? "cross_entropy" : "mse"; }

std::vector<NamedMetric> Evaluator::default_metrics(const DataSpec& spec) {
  std::vector<NamedMetric> out;
  // No targets at all (an empty evaluation set, a generative model's images): nothing to measure by default.
  if (spec.input_shape.empty() && spec.target_shape.empty() && !spec.classification()) return out;
  if (!spec.has_targets()) return out;
  const std::vector<std::string> names =
      spec.classification() ? std::vector<std::string>{"accuracy"} : std::vector<std::string>{"mae", "rmse", "r2"};
  for (const auto& name : names) {
    const auto* entry = components().metrics.find(name);
    if (entry == nullptr) throw Error("the built-in metric '" + name + "' is not registered");
    out.push_back(NamedMetric{name, entry->factory(PluginConfig(), spec)});
  }
  return out;
}

// One pass over the evaluation set with the weights the model holds now (plugins may have swapped them at
// eval_start), fired as eval_start … eval_end with state.eval_label = label.
EvalResult Evaluator::pass(const std::string& label) {
  torch::nn::Module& module = *model_.ptr();
  state_.eval_label = label;
  // What plugins log during the pass (eval_start … eval_end) is printed on the pass's line.
  logger_.begin_capture();
  engine_.fire(Event::eval_start);
  std::optional<ModuleModeScope> eval_mode(std::in_place, module, /*training=*/false);
  auto started = std::chrono::steady_clock::now();
  double loss_sum = 0;
  std::int64_t seen = 0;
  const bool with_loss = logs_loss();
  for (auto& m : metrics_) m.metric->reset();
  {
    c10::NoGradGuard no_grad;
    // Each rank evaluates its contiguous share; the sums are reduced below.
    const std::int64_t first = data_.size() * options_.rank / options_.world_size;
    const std::int64_t n = data_.size() * (options_.rank + 1) / options_.world_size;
    PrefetchLoader loader(data_, sequential_plan(first, n, options_.eval_batch_size), loader_options(options_, device_));
    for (std::int64_t begin = first; begin < n; begin += options_.eval_batch_size) {
      const std::int64_t end = std::min(n, begin + options_.eval_batch_size);
      // Seeded by the batch's first sample: every pass and every evaluation draws the same (a sampler's noise).
      StepGeneratorScope step_random(state_, StepStream::eval, static_cast<std::uint64_t>(begin));
      state_.batch = to_device(loader.next(), device_);
      engine_.fire(Event::eval_batch_start);
      engine_.fire(Event::eval_before_forward);
      // A LibTorch error names the pass, the set, the batch's samples and what was running, without a backtrace.
      const auto where = [&] {
        return "evaluation " + (state_.eval_label.empty() ? std::string("eval") : state_.eval_label) +
               (set_.empty() ? "" : "/" + set_) + ", samples " + std::to_string(begin) + " to " +
               std::to_string(end - 1) + " of " + data_.name;
      };
      const auto spec = [this] { return data_.spec(); };
      state_.outputs = detail::autocast_step(precision_, device_.type(), where, "the model's forward", state_.batch,
                                             spec, [&] { return model_.eval_forward(state_.batch); });
      engine_.fire(Event::eval_after_forward);
      if (with_loss)
        loss_sum += detail::autocast_step(precision_, device_.type(), where, "the loss", state_.batch, spec, [&] {
                      return loss_(state_.outputs, state_.batch).item<double>();
                    }) * static_cast<double>(end - begin);
      detail::during_step(where, "a metric's update", state_.batch, spec, [&] {
        for (auto& m : metrics_) m.metric->update(state_.outputs, state_.batch);
      });
      seen += end - begin;
      engine_.fire(Event::eval_batch_end);
      state_.clear_step_data();
    }
  }
  eval_mode.reset();
  // Every rank's sums added in one collective: the loss and sample count, then each metric's sums in order.
  std::vector<double> sums{loss_sum, static_cast<double>(seen)};
  for (const auto& m : metrics_) {
    const auto part = m.metric->sums();
    sums.insert(sums.end(), part.begin(), part.end());
  }
  if (options_.communicator) sums = options_.communicator->sum(sums);
  loss_sum = sums[0];
  seen = static_cast<std::int64_t>(std::llround(sums[1]));
  EvalResult result;
  result.label = label;
  result.samples = seen;
  result.set = set_;
  if (with_loss) {
    result.loss = seen ? loss_sum / static_cast<double>(seen) : 0;
    logger_.log_metric(key(label, "loss"), result.loss);
  }
  std::size_t at = 2;
  for (const auto& m : metrics_) {
    const std::size_t count = m.metric->sums().size();
    const std::vector<double> mine(sums.begin() + static_cast<std::ptrdiff_t>(at),
                                   sums.begin() + static_cast<std::ptrdiff_t>(at + count));
    at += count;
    result.metrics.push_back(EvalResult::Value{m.name, m.metric->compute(mine), m.metric->higher_is_better()});
    logger_.log_metric(key(label, m.name), result.metrics.back().value);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  engine_.fire(Event::eval_end);
  std::string plugin_metrics;
  std::string own = with_loss ? "loss " + format_decimals(result.loss, 4) : "";
  for (const auto& value : result.metrics)
    own += (own.empty() ? "" : "  ") + value.name + " " + format_decimals(value.value, 4);
  for (const auto& [name, value] : logger_.end_capture()) {
    const bool evaluator_logged =
        (with_loss && name == key(label, "loss")) ||
        std::any_of(result.metrics.begin(), result.metrics.end(),
                    [&](const EvalResult::Value& v) { return name == key(label, v.name); });
    if (!evaluator_logged) plugin_metrics += "  " + name + " " + format_decimals(value, 4);
  }
  if (!options_.quiet)
    logger_.info("[" + format_timestamp(state_.progress.now) + "] " + (set_.empty() ? label : label + "/" + set_) +
                 ": " + own + plugin_metrics + "  (" +
                 std::to_string(seen) +
                 " samples, " + format_decimals(seconds, 1) + " s)");
  return result;
}

std::vector<EvalResult> Evaluator::run() {
  state_.eval_set = set_;  // from eval_before_all to eval_after_all
  engine_.fire(Event::eval_before_all);
  std::vector<EvalResult> results;
  for (const auto& label : state_.facts.eval_passes()) results.push_back(pass(label));
  state_.eval_label.clear();
  engine_.fire(Event::eval_after_all);
  state_.eval_set.clear();
  logger_.flush();
  return results;
}

PredictResult Evaluator::predict(const Dataset& data) {
  torch::nn::Module& module = *model_.ptr();
  // A plugin that keeps several weight sets names the one it swaps in here (State::weights).
  state_.weights.clear();
  engine_.fire(Event::predict_start);
  const std::string weights = state_.weights;
  std::optional<ModuleModeScope> eval_mode(std::in_place, module, /*training=*/false);
  std::vector<Outputs> outputs;
  std::vector<at::Tensor> targets;
  {
    c10::NoGradGuard no_grad;
    PrefetchLoader loader(data, sequential_plan(0, data.size(), options_.eval_batch_size), loader_options(options_, device_));
    for (std::int64_t begin = 0; !loader.done(); begin += options_.eval_batch_size) {
      StepGeneratorScope step_random(state_, StepStream::predict, static_cast<std::uint64_t>(begin));
      const Batch batch = loader.next();
      state_.batch = to_device(batch, device_);
      if (const at::Tensor* t = batch.find("targets")) targets.push_back(*t);
      engine_.fire(Event::predict_batch_start);
      engine_.fire(Event::predict_before_forward);
      state_.outputs = detail::autocast_step(
          precision_, device_.type(), [&] { return "prediction, samples from " + std::to_string(begin) + " of " + data.name; },
          "the model's forward", state_.batch, [&] { return data.spec(); },
          [&] { return model_.eval_forward(state_.batch); });
      engine_.fire(Event::predict_after_forward);
      // Reduced-precision outputs are written as float32, what readers of the file expect of scores.
      Outputs out;
      for (const auto& [name, t] : state_.outputs) {
        at::Tensor cpu = t.detach().to(at::kCPU);
        if (cpu.scalar_type() == at::kBFloat16 || cpu.scalar_type() == at::kHalf) cpu = cpu.to(at::kFloat);
        out.set(name, cpu);
      }
      outputs.push_back(std::move(out));
      engine_.fire(Event::predict_batch_end);
      state_.clear_step_data();
    }
  }
  eval_mode.reset();
  engine_.fire(Event::predict_end);
  PredictResult result;
  result.weights = weights;
  result.outputs = join_outputs(outputs);
  if (!targets.empty() && targets.size() == outputs.size()) result.targets = at::cat(targets);
  // Class scores [N, C]: the predicted class is their argmax, as accuracy counts it.
  if (result.outputs.defined() && result.outputs.main().dim() == 2)
    result.predictions = at::argmax(result.outputs.main(), 1);
  return result;
}

void Evaluator::run_in_fit() {
  const auto before = state_.metrics;
  run();
  // The record keeps every metric logged during the evaluation, so plugins' eval metrics show in the summary.
  EvalRecord record;
  record.at = state_.progress.now;
  for (const auto& [name, value] : state_.metrics) {
    auto it = before.find(name);
    // Its own metrics even when a value repeats; another set's only when logged during this evaluation.
    if (owns(name) || it == before.end() || it->second != value) record.metrics[name] = value;
  }
  // One row per point of the run: the sets evaluated at the same batch share it, and a run resumed at its very
  // end, evaluating again where its history's last evaluation was, updates that row.
  if (!history_.empty() && history_.back().at.batch == record.at.batch) {
    for (auto& [name, value] : record.metrics) history_.back().metrics[name] = value;
    history_.back().at = record.at;
  } else {
    history_.push_back(std::move(record));
  }
  last_batch_ = state_.progress.now.batch;
}

void Evaluator::load_history(const std::string& metrics_path, std::int64_t resumed_at) {
  for (auto& logged : read_logged_evaluations(metrics_path, resumed_at))
    history_.push_back(EvalRecord{logged.at, std::move(logged.metrics)});
}

}  // namespace baton

namespace baton {

double EvalResult::metric(const std::string& name) const {
  for (const auto& value : metrics)
    if (value.name == name) return value.value;
  throw Error("evaluation '" + label + "' has no metric '" + name + "'");
}

}  // namespace baton
