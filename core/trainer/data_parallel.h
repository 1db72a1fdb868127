#pragma once
// What a data-parallel run adds to the step, over the run's Communicator: each is a no-op in a single process
// (null communicator). Every rank calls them at the same points.
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::nn {
class Module;
}

namespace baton {

class Communicator;

/// Every rank starts from rank 0's parameters and buffers, whatever each initialised or loaded.
void broadcast_model(Communicator* comm, torch::nn::Module& module);
/// Buffers (batch-norm statistics) are not trained by gradients: rank 0's are used everywhere, as DDP does.
void broadcast_buffers(Communicator* comm, torch::nn::Module& module);
/// The mean of every rank's gradients, in place.
void average_gradients(Communicator* comm, torch::nn::Module& module);
/// The same for some parameters (one optimizer's); parameters without a gradient are left out on every rank.
void average_gradients(Communicator* comm, const std::vector<at::Tensor>& parameters);

}  // namespace baton
