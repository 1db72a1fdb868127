#pragma once
// A module in train or eval mode for a scope, then back in the mode it had, also when the scope ends by an
// exception: an evaluation, a prediction, a probe or a pass over the training data that fails must not leave the
// model in the wrong mode for the steps after it (batch norm would stop updating, or dropout start).
#include <torch/nn/module.h>

namespace baton {

class ModuleModeScope {
 public:
  ModuleModeScope(torch::nn::Module& module, bool training) : module_(module), was_training_(module.is_training()) {
    module_.train(training);
  }
  ~ModuleModeScope() { module_.train(was_training_); }
  ModuleModeScope(const ModuleModeScope&) = delete;
  ModuleModeScope& operator=(const ModuleModeScope&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

}  // namespace baton
