#include "trainer/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cat.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "baton/communicator.h"
#include "engine/engine.h"
#include "logging/metrics_history.h"
#include "logging/run_logger.h"
#include "trainer/format.h"
#include "trainer/precision.h"
#include "trainer/step_metrics.h"

namespace baton {

Evaluator::Evaluator(State& state, Engine& engine, RunLogger& logger, const TrainerOptions& options,
                     torch::nn::AnyModule& model, const Dataset& data, LossFunction loss)
    : state_(state),
      engine_(engine),
      logger_(logger),
      options_(options),
      model_(model),
      data_(data),
      loss_(std::move(loss)) {}

// One pass over the evaluation set with the weights the model holds now (plugins may have swapped them at
// eval_start), fired as eval_start … eval_end with state.eval_label = label.
EvalResult Evaluator::pass(const std::string& label) {
  at::Device device(options_.device);
  const Precision precision = parse_precision(options_.precision);
  torch::nn::Module& module = *model_.ptr();
  state_.eval_label = label;
  // What plugins log during the pass (eval_start … eval_end) is printed on the pass's line.
  logger_.begin_capture();
  engine_.fire(Event::eval_start);
  const bool was_training = module.is_training();
  module.eval();
  auto started = std::chrono::steady_clock::now();
  double loss_sum = 0;
  std::int64_t correct = 0, seen = 0;
  const bool classes = data_.spec().classification();
  {
    c10::NoGradGuard no_grad;
    // Each rank evaluates its contiguous share; the sums are reduced below.
    const std::int64_t first = data_.size() * options_.rank / options_.world_size;
    const std::int64_t n = data_.size() * (options_.rank + 1) / options_.world_size;
    for (std::int64_t begin = first; begin < n; begin += options_.eval_batch_size) {
      const std::int64_t end = std::min(n, begin + options_.eval_batch_size);
      const Batch batch = data_.get(at::arange(begin, end, at::kLong));
      state_.batch.inputs = batch.inputs.to(device);
      state_.batch.targets = batch.targets.to(device);
      engine_.fire(Event::eval_batch_start);
      engine_.fire(Event::eval_before_forward);
      {
        AutocastScope autocast(precision, device.type());
        state_.outputs = model_.forward(state_.batch.inputs);
      }
      engine_.fire(Event::eval_after_forward);
      double batch_loss = 0;
      {
        AutocastScope autocast(precision, device.type());
        batch_loss = loss_(state_.outputs, state_.batch.targets).item<double>();
      }
      loss_sum += batch_loss * static_cast<double>(end - begin);
      if (classes) correct += count_correct(state_.outputs, state_.batch.targets);
      seen += end - begin;
      engine_.fire(Event::eval_batch_end);
      state_.clear_step_data();
    }
  }
  if (was_training) module.train();
  if (options_.communicator) {
    auto sums = options_.communicator->sum({loss_sum, static_cast<double>(correct), static_cast<double>(seen)});
    loss_sum = sums[0];
    correct = static_cast<std::int64_t>(std::llround(sums[1]));
    seen = static_cast<std::int64_t>(std::llround(sums[2]));
  }
  EvalResult result;
  result.label = label;
  result.samples = seen;
  result.loss = seen ? loss_sum / static_cast<double>(seen) : 0;
  result.accuracy = seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0;
  logger_.log_metric(label + "/loss", result.loss);
  logger_.log_metric(label + "/accuracy", result.accuracy);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  engine_.fire(Event::eval_end);
  std::string plugin_metrics;
  for (const auto& [name, value] : logger_.end_capture())
    if (name != label + "/loss" && name != label + "/accuracy") plugin_metrics += "  " + name + " " + format_number(value);
  if (!options_.quiet)
    logger_.info("[" + format_timestamp(state_.progress.now) + "] " + label + ": loss " + format_number(result.loss) +
                 "  accuracy " + format_number(result.accuracy) + plugin_metrics + "  (" + std::to_string(seen) +
                 " samples, " + format_number(seconds, 1) + " s)");
  return result;
}

std::vector<EvalResult> Evaluator::run() {
  engine_.fire(Event::eval_before_all);
  std::vector<EvalResult> results;
  const std::vector<std::string> labels = state_.eval_labels;  // a change mid-evaluation affects the next one
  for (const auto& label : labels) results.push_back(pass(label));
  state_.eval_label.clear();
  engine_.fire(Event::eval_after_all);
  logger_.flush();
  return results;
}

PredictResult Evaluator::predict(const Dataset& data) {
  at::Device device(options_.device);
  const Precision precision = parse_precision(options_.precision);
  torch::nn::Module& module = *model_.ptr();
  engine_.fire(Event::predict_start);
  const bool was_training = module.is_training();
  module.eval();
  std::vector<at::Tensor> outputs, targets;
  {
    c10::NoGradGuard no_grad;
    for (std::int64_t begin = 0; begin < data.size(); begin += options_.eval_batch_size) {
      const std::int64_t end = std::min(data.size(), begin + options_.eval_batch_size);
      const Batch batch = data.get(at::arange(begin, end, at::kLong));
      state_.batch.inputs = batch.inputs.to(device);
      if (batch.targets.defined()) {
        state_.batch.targets = batch.targets.to(device);
        targets.push_back(batch.targets);
      }
      engine_.fire(Event::predict_batch_start);
      engine_.fire(Event::predict_before_forward);
      {
        AutocastScope autocast(precision, device.type());
        state_.outputs = model_.forward(state_.batch.inputs);
      }
      engine_.fire(Event::predict_after_forward);
      // Reduced-precision outputs are written as float32, what readers of the file expect of scores.
      at::Tensor out = state_.outputs.detach().to(at::kCPU);
      if (out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf) out = out.to(at::kFloat);
      outputs.push_back(out);
      engine_.fire(Event::predict_batch_end);
      state_.clear_step_data();
    }
  }
  if (was_training) module.train();
  engine_.fire(Event::predict_end);
  PredictResult result;
  if (!outputs.empty()) result.outputs = at::cat(outputs);
  if (!targets.empty() && targets.size() == outputs.size()) result.targets = at::cat(targets);
  // Class scores [N, C]: the predicted class is their argmax, as accuracy counts it.
  if (result.outputs.defined() && result.outputs.dim() == 2) result.predictions = at::argmax(result.outputs, 1);
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
    const bool is_eval_metric = name.rfind("eval", 0) == 0;
    if (is_eval_metric || it == before.end() || it->second != value) record.metrics[name] = value;
  }
  // A run resumed at its very end evaluates again where its history's last evaluation was: one row per point.
  if (!history_.empty() && history_.back().at.batch == record.at.batch) history_.pop_back();
  history_.push_back(std::move(record));
  last_batch_ = state_.progress.now.batch;
}

void Evaluator::load_history(const std::string& metrics_path, std::int64_t resumed_at) {
  for (auto& logged : read_logged_evaluations(metrics_path, resumed_at))
    history_.push_back(EvalRecord{logged.at, std::move(logged.metrics)});
}

}  // namespace baton
