#pragma once
// Where run_unit (baton/unit.h) finds the run that shards a module: a zero3 step registers its units' modules
// here for its lifetime. Keyed by the module's address, so several trainers in one process keep their own.
#include "baton/unit.h"

namespace baton::detail {

class UnitRunner {
 public:
  virtual ~UnitRunner() = default;
  /// Runs `forward(input)` as the unit `module` (gathering its parameters around it).
  virtual at::Tensor run(const torch::nn::Module& module, const UnitForward& forward, const at::Tensor& input) = 0;
};

/// `runner` runs `module` from now on; throws Error when another runner holds it already.
void register_unit(const torch::nn::Module& module, UnitRunner& runner);
/// Forgets `module` (when it is registered to `runner`).
void unregister_unit(const torch::nn::Module& module, const UnitRunner& runner);

}  // namespace baton::detail
