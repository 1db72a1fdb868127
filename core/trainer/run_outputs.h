#pragma once
// The files a training run leaves in its folder at its end, written by built-in callbacks that the trainer adds
// after the configured plugins (so at fit_end they see what every plugin did): model.safetensors, the final
// weights under the model's names, and eval_<metric>.svg, the chart of every "<pass>/<metric>" over the run.
#include <vector>

#include "baton/plugin.h"
#include "baton/trainer.h"

namespace baton {

/// <run_dir>/model.safetensors at fit_end, rank 0, unless the run failed (`failed` is the trainer's flag, set
/// before fit_end fires), whole or absent (write_safetensors_atomic).
class ModelExport final : public Callback {
 public:
  explicit ModelExport(const bool& failed) : failed_(failed) {}
  void fit_end(State& state, Logger& logger) override;

 private:
  const bool& failed_;
};

/// <run_dir>/eval_<metric>.svg for every evaluation metric and the loss (eval_accuracy.svg, eval_loss.svg, ...),
/// each with a line per evaluation pass, at fit_end, rank 0, from the trainer's history of evaluations (a resumed
/// run's includes those before the resume), on every exit path.
class EvalPlots final : public Callback {
 public:
  EvalPlots(const std::vector<EvalRecord>& history, const std::vector<NamedMetric>& metrics)
      : history_(history), metrics_(metrics) {}
  void fit_end(State& state, Logger& logger) override;

 private:
  const std::vector<EvalRecord>& history_;
  const std::vector<NamedMetric>& metrics_;
};

}  // namespace baton
