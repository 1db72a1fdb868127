#pragma once
// Shared by the ema plugin's tests: loading the built plugin through the loader (as `baton train` does), small
// synthetic trainers, a recorder of the weight trajectory, and the closed-form EMA of a recorded trajectory.
// Include after "baton_test.h".
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ops/equal.h>
#include <torch/nn/module.h>
#include <torch/optim/sgd.h>

#include "baton/safetensors.h"
#include "baton/trainer.h"
#include "baton/builtin_datasets.h"
#include "baton/plugin_loader.h"
#include "baton/models.h"
#include "small_trainer.h"

namespace ema_test {

namespace fs = std::filesystem;
using baton::Event;
using baton::Time;
using baton::TimeUnit;
using baton::test::make_trainer;   // small_trainer.h: the convnet on 96 synthetic samples
using baton::test::quiet_options;
using baton::test::bitwise_equal;
using baton::test::copy_state;
using baton::test::Weights;

inline baton::LoadedPlugin load_ema(const std::string& toml) {
  return baton::PluginLoader().load(BATON_EMA_PLUGIN_FILE, baton::PluginConfig::from_toml(toml, "ema", "run.toml"));
}

inline Weights to_map(const baton::NamedTensors& tensors) {
  Weights out;
  for (const auto& [name, tensor] : tensors) out[name] = tensor;
  return out;
}

/// The plugin's EMA tensors, from its checkpoint state ("shadow/<name>").
inline Weights shadow_of(const baton::Plugin& plugin) {
  baton::StateDict state;
  plugin.state_dict(state);
  Weights out;
  for (const auto& key : state.tensor_keys())
    if (key.rfind("shadow/", 0) == 0) out[key.substr(7)] = state.tensor(key);
  return out;
}

/// Records the weights after every batch (batch_end) under the batch count.
struct TrajectoryRecorder : baton::Algorithm {
  std::map<std::int64_t, Weights> at_batch;
  bool match(Event e, const baton::State&) override { return e == Event::batch_end; }
  void apply(Event, baton::State& s, baton::Logger&) override { at_batch[s.timestamp().batch] = copy_state(*s.facts.model()); }
};

/// The EMA written out by hand: a copy of the weights at the first step's batch, then e = s e + (1 - s) w at each
/// further (batch, s), in double precision. Integer tensors are copied at every step.
inline Weights closed_form_ema(const std::map<std::int64_t, Weights>& trajectory,
                               const std::vector<std::pair<std::int64_t, double>>& steps) {
  Weights e;
  for (const auto& [name, w] : trajectory.at(steps.front().first))
    e[name] = w.is_floating_point() ? w.to(at::kDouble) : w.clone();
  for (std::size_t i = 1; i < steps.size(); ++i) {
    auto [batch, s] = steps[i];
    for (const auto& [name, w] : trajectory.at(batch)) {
      if (w.is_floating_point())
        e[name] = e[name] * s + w.to(at::kDouble) * (1.0 - s);
      else
        e[name] = w.clone();
    }
  }
  return e;
}

/// Largest |a - b| over every tensor of `expected` (in double); integer tensors must match exactly (else +inf).
inline double max_difference(const Weights& actual, const Weights& expected) {
  double worst = 0;
  for (const auto& [name, want] : expected) {
    auto it = actual.find(name);
    if (it == actual.end()) return INFINITY;
    const at::Tensor& got = it->second;
    if (!want.is_floating_point()) {
      if (got.scalar_type() != want.scalar_type() || !at::equal(got, want)) return INFINITY;
      continue;
    }
    double d = (got.to(at::kDouble) - want).abs().max().item<double>();
    worst = std::max(worst, d);
  }
  return worst;
}

/// The test convnet trained with the ema plugin configured by `toml`, with the weights recorded after every batch.
struct Trained {
  std::unique_ptr<baton::Trainer> trainer;
  baton::LoadedPlugin ema;
  std::shared_ptr<TrajectoryRecorder> trajectory;
  baton::FitResult result;
};

inline Trained train_with_ema(const std::string& toml, baton::TrainerOptions options) {
  Trained t;
  t.trainer = make_trainer(std::move(options));
  t.ema = load_ema(toml);
  t.trajectory = std::make_shared<TrajectoryRecorder>();
  t.trainer->add_plugin("ema", t.ema.plugin);
  t.trainer->add_plugin("trajectory", t.trajectory);
  t.result = t.trainer->fit();
  return t;
}

/// Loads the plugin with `toml` and returns the ConfigError's text ("" when none was thrown).
inline std::string config_error(const std::string& toml) {
  try {
    load_ema(toml);
  } catch (const baton::ConfigError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline bool warned(const baton::Trainer& trainer, const std::string& part) {
  for (const auto& w : trainer.warnings())
    if (contains(w, part)) return true;
  return false;
}

}  // namespace ema_test
