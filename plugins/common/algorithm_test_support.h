#pragma once
// Shared by the built-in algorithms' tests: loading the built plugin through the loader (as `baton train` does),
// a logger that keeps what was logged, tensors read out as plain numbers (so expected values are computed by
// loops, not by the ATen calls the plugins use), and the stop-and-resume comparison of the stochastic ones.
// Include after "baton_test.h".
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/ops/equal.h>
#include <torch/nn/module.h>

#include "baton/trainer.h"
#include "baton/plugin_loader.h"
#include "plugin_files.h"
#include "small_trainer.h"

namespace algorithm_test {

using baton::Event;
using baton::Time;
using baton::TimeUnit;
using baton::test::make_trainer;
using baton::test::quiet_options;
using baton::test::bitwise_equal;
using baton::test::copy_state;
using baton::test::hand_cross_entropy;
using baton::test::labels_of;
using baton::test::Rows;
using baton::test::rows_of;
using baton::test::values_of;
using baton::test::Weights;

/// The built-in plugin `name` (its library in the build), configured by `toml` as [plugins.<name>].
inline baton::LoadedPlugin load(const std::string& toml, const std::string& name) {
  return baton::PluginLoader().load(baton::test::plugin_file(name), baton::PluginConfig::from_toml(toml, name, "run.toml"));
}

/// The ConfigError's text when loading with `toml` ("" when none was thrown).
inline std::string config_error(const std::string& toml, const std::string& name) {
  try {
    load(toml, name);
  } catch (const baton::ConfigError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Keeps every metric logged, in order.
struct RecordingLogger final : baton::Logger {
  std::vector<std::pair<std::string, double>> metrics;
  void log_metric(std::string_view name, double value) override { metrics.emplace_back(std::string(name), value); }
  void info(std::string_view) override {}
  void warn(std::string_view) override {}
  double last(const std::string& name) const {
    for (auto it = metrics.rbegin(); it != metrics.rend(); ++it)
      if (it->first == name) return it->second;
    return NAN;
  }
};

/// One-hot row of `label` among `classes`.
inline std::vector<double> one_hot(std::int64_t label, std::size_t classes) {
  std::vector<double> row(classes, 0.0);
  row[static_cast<std::size_t>(label)] = 1.0;
  return row;
}

inline double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

/// What one training batch looked like around the plugin under test.
struct BatchRecord {
  at::Tensor drawn_inputs, drawn_targets;  // as drawn, before any plugin's after_dataloader
  at::Tensor inputs;                       // after every plugin's after_dataloader
  std::map<std::string, double> metrics;   // State::metrics then
  std::vector<at::Tensor> loss_targets;    // at each before_loss (one per microbatch), after the plugins
  std::vector<at::Tensor> outputs;         // the outputs there
  std::vector<at::Tensor> losses;          // at each after_loss, after the plugins
  std::vector<at::Tensor> targets_after_loss;
};
using Records = std::map<std::int64_t, BatchRecord>;  // by the batch's 0-based index

/// Add after the plugin under test: on after_dataloader algorithms run in reverse order, so this one sees the
/// batch as drawn.
struct DrawnBatchProbe : baton::Algorithm {
  std::shared_ptr<Records> records = std::make_shared<Records>();
  bool match(Event e, const baton::State&) override { return e == Event::after_dataloader; }
  void apply(Event, baton::State& s, baton::Logger&) override {
    auto& r = (*records)[s.timestamp().batch];
    r.drawn_inputs = s.batch.inputs().clone();
    r.drawn_targets = s.batch.targets().clone();
  }
};

/// Callbacks run after every algorithm: this one sees what the plugins made of the step.
struct StepProbe : baton::Callback {
  std::shared_ptr<Records> records;
  explicit StepProbe(std::shared_ptr<Records> r) : records(std::move(r)) {}
  void after_dataloader(baton::State& s, baton::Logger&) override {
    auto& r = (*records)[s.timestamp().batch];
    r.inputs = s.batch.inputs().clone();
    r.metrics = s.metrics;
  }
  void before_loss(baton::State& s, baton::Logger&) override {
    auto& r = (*records)[s.timestamp().batch];
    r.loss_targets.push_back(s.batch.targets().clone());
    r.outputs.push_back(s.outputs.main().detach().clone());
  }
  void after_loss(baton::State& s, baton::Logger&) override {
    auto& r = (*records)[s.timestamp().batch];
    r.losses.push_back(s.loss.detach().clone());
    r.targets_after_loss.push_back(s.batch.targets().clone());
  }
};

/// Trains the test model (convnet, or "mlp") with the plugin loaded from `toml` and both probes; returns what
/// they saw, batch by batch.
inline Records train_probed(const std::string& toml, const std::string& name, baton::TrainerOptions options,
                            const std::string& model = "convnet") {
  auto trainer = make_trainer(std::move(options), model);
  auto drawn = std::make_shared<DrawnBatchProbe>();
  trainer->add_plugin(name, load(toml, name).plugin);
  trainer->add_plugin("drawn", drawn);
  trainer->add_plugin("step", std::make_shared<StepProbe>(drawn->records));
  trainer->fit();
  return *drawn->records;
}

/// Final weights of three runs of the test convnet for 3 epochs (9 batches), with the plugin loaded from `toml` and
/// a checkpoint after every batch: uninterrupted; stopped after batch 5 and resumed from its newest checkpoint; and
/// without the plugin (to show that it changed training at all).
struct ResumeComparison {
  Weights whole, resumed, without_plugin;
  std::int64_t resumed_end = 0;
};

inline ResumeComparison train_stopped_and_resumed(const std::string& toml, const std::string& name) {
  auto dir = baton::test::scratch_dir(name + "-resume");
  auto options = [&](const std::string& run) {
    auto o = quiet_options((dir / run).string());
    o.max_duration = Time(3, TimeUnit::epoch);
    o.save_interval = Time(1, TimeUnit::batch);
    return o;
  };
  struct StopAt : baton::Callback {
    void batch_end(baton::State& s, baton::Logger&) override {
      if (s.timestamp().batch == 5) s.request_stop("pause");
    }
  };
  ResumeComparison out;
  {
    auto whole = make_trainer(options("whole"));
    whole->add_plugin(name, load(toml, name).plugin);
    whole->fit();
    out.whole = copy_state(whole->model());
  }
  {
    auto first = make_trainer(options("split"));
    first->add_plugin(name, load(toml, name).plugin);
    first->add_plugin("stop", std::make_shared<StopAt>());
    first->fit();
    auto resumed_options = options("split");
    resumed_options.resume = "auto";
    auto resumed = make_trainer(resumed_options);
    resumed->add_plugin(name, load(toml, name).plugin);
    out.resumed_end = resumed->fit().end.batch;
    out.resumed = copy_state(resumed->model());
  }
  {
    auto plain = make_trainer(options("plain"));
    plain->fit();
    out.without_plugin = copy_state(plain->model());
  }
  return out;
}

}  // namespace algorithm_test
