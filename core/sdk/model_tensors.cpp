#include "baton/model_tensors.h"

#include <torch/nn/module.h>

namespace baton {

std::vector<ModelTensor> model_tensors(const torch::nn::Module& module) {
  std::vector<ModelTensor> out;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    if (item.value().defined()) out.push_back({item.key(), item.value(), true});
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    if (item.value().defined()) out.push_back({item.key(), item.value(), false});
  return out;
}

NamedTensors named_model_tensors(const torch::nn::Module& module, bool buffers) {
  NamedTensors out;
  for (auto& item : model_tensors(module))
    if (buffers || item.parameter) out.emplace_back(std::move(item.name), std::move(item.tensor));
  return out;
}

}  // namespace baton
