// The built-in optimizers as components: [optimizer] name = "sgd" | "adam" | "adamw", with PyTorch's meanings
// and, where baton's main job does not need another, PyTorch's defaults.
#include <memory>
#include <vector>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "baton/components.h"
#include "components/builtins.h"

namespace baton {
namespace {

const Range kPositive = Range::above(0);
const Range kNonNegative = Range::at_least(0);
const Range kUnitOpen = Range::half_open(0, 1);

std::shared_ptr<torch::optim::Optimizer> make_sgd(const PluginConfig& c, const std::vector<at::Tensor>& parameters) {
  const bool nesterov = c.get_or<bool>("nesterov", false);
  const double momentum = c.get_number_or("momentum", 0.9, kUnitOpen);
  if (nesterov && momentum == 0) c.fail("nesterov", "Nesterov momentum needs momentum > 0");
  return std::make_shared<torch::optim::SGD>(parameters,
                                             torch::optim::SGDOptions(c.get_number_or("lr", 0.05, kPositive))
                                                 .momentum(momentum)
                                                 .nesterov(nesterov)
                                                 .weight_decay(c.get_number_or("weight_decay", 0.0, kNonNegative)));
}

template <class Options>
Options adam_options(const PluginConfig& c, double default_decay) {
  return Options(c.get_number_or("lr", 1e-3, kPositive))
      .betas({c.get_number_or("beta1", 0.9, kUnitOpen), c.get_number_or("beta2", 0.999, kUnitOpen)})
      .eps(c.get_number_or("eps", 1e-8, kPositive))
      .weight_decay(c.get_number_or("weight_decay", default_decay, kNonNegative));
}

std::shared_ptr<torch::optim::Optimizer> make_adam(const PluginConfig& c, const std::vector<at::Tensor>& parameters) {
  return std::make_shared<torch::optim::Adam>(parameters, adam_options<torch::optim::AdamOptions>(c, 0.0));
}

std::shared_ptr<torch::optim::Optimizer> make_adamw(const PluginConfig& c, const std::vector<at::Tensor>& parameters) {
  return std::make_shared<torch::optim::AdamW>(parameters, adam_options<torch::optim::AdamWOptions>(c, 0.01));
}

}  // namespace

void register_builtin_optimizers(Components& components) {
  components.optimizers.add("sgd", "SGD: lr (0.05), momentum (0.9), nesterov (false), weight_decay (0)", &make_sgd);
  components.optimizers.add("adam", "Adam: lr (0.001), beta1 (0.9), beta2 (0.999), eps (1e-8), weight_decay (0)",
                            &make_adam);
  components.optimizers.add("adamw",
                            "AdamW, decoupled weight decay: lr (0.001), beta1, beta2, eps, weight_decay (0.01)",
                            &make_adamw);
}

}  // namespace baton
