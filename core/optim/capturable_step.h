#pragma once
// An optimizer's update that a CUDA graph can record once and replay every step (trainer.cuda_graphs). LibTorch's
// optimizers pass the learning rate and Adam's bias corrections to their kernels as host numbers, so a recorded
// step would replay the first step's rate for the rest of the run; here everything that changes from step to step
// lives in small device tensors that prepare() fills before each step (outside the graph, without waiting for the
// GPU) and step() reads (inside it). The optimizer's own state (momentum buffers, Adam's moments and step counts)
// is the state it updates, so checkpoints and a resume see what the optimizer's own steps would have left.
//
// SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW as LibTorch computes them, without amsgrad.
// On the CPU the result equals LibTorch's step bit for bit for Adam and AdamW (the same operations in the same
// order). For SGD LibTorch computes p - lr * d as one fused multiply-add; with the rate in a tensor it is a
// multiply-add the compiler may or may not fuse, so it is bit for bit where it does (the optim tests' builds) and
// within one rounding of the update where it does not; the optim tests check 40 steps against LibTorch's own.
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}

namespace baton::optim {

class CapturableStep {
 public:
  /// Why `optimizer` cannot step inside a graph ("" when it can): an optimizer other than SGD, Adam or AdamW,
  /// amsgrad, or parameters of one group at different step counts.
  static std::string refusal(const torch::optim::Optimizer& optimizer);

  /// After the optimizer's own first step, which creates its state (the trainer's warm-up steps run eagerly). The
  /// parameters stepped are those with a gradient now; a graph replays them, the others stay as they are. Throws
  /// Error with refusal()'s text, or naming a parameter whose state the optimizer has not created yet.
  explicit CapturableStep(torch::optim::Optimizer& optimizer);
  ~CapturableStep();
  CapturableStep(const CapturableStep&) = delete;
  CapturableStep& operator=(const CapturableStep&) = delete;

  /// Host side, before each step recorded or replayed: this step's rates and bias corrections into the device
  /// scalars (asynchronous fills), and Adam's step counts advanced as its own step advances them.
  void prepare();
  /// Undoes prepare()'s advance of the step counts, for a step that did not run after all (a recording that failed).
  void retract();
  /// The update: device work alone, reading the scalars prepare() filled. What a graph records.
  void step();

 private:
  struct Group;
  std::vector<Group> groups_;
};

}  // namespace baton::optim
