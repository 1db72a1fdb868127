#include "trainer/data_parallel.h"

#include <vector>

#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "baton/communicator.h"
#include "baton/model_tensors.h"

namespace baton {

void broadcast_model(Communicator* comm, torch::nn::Module& module) {
  if (!comm) return;
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (auto& item : model_tensors(module)) tensors.push_back(item.tensor);
  comm->broadcast(tensors);
}

void broadcast_buffers(Communicator* comm, torch::nn::Module& module) {
  if (!comm || module.buffers().empty()) return;
  c10::NoGradGuard no_grad;
  comm->broadcast(module.buffers());
}

void average_gradients(Communicator* comm, torch::nn::Module& module) {
  average_gradients(comm, module.parameters());
}

void average_gradients(Communicator* comm, const std::vector<at::Tensor>& parameters) {
  if (!comm) return;
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  comm->average(grads);
}

}  // namespace baton
