// zero3's units (zero.h): a unit's parameters gathered for its forward and again for its backward, where its
// forward is recomputed with a graph, its gradients reduce-scattered into the shard's and its parameters released.
#include <algorithm>
#include <mutex>
#include <utility>

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/module.h>

#include "baton/communicator.h"
#include "baton/error.h"
#include "sharding/zero.h"

namespace baton::sharding {
namespace {

// What the backward of one unit call needs: the unit, its forward (kept by value, called again), the random
// generator's state before the forward and the context (autocast) to recompute under.
struct UnitCall : torch::CustomClassHolder {
  ShardedStep* step = nullptr;
  std::size_t unit = 0;
  const torch::nn::Module* module = nullptr;
  UnitForward forward;
  at::Generator generator;
  at::Tensor generator_state;
  std::function<std::shared_ptr<void>()> context;
};

// The generator the unit's random ops draw from: the input's device's default one.
at::Generator generator_for(const at::Tensor& input) {
  return at::globalContext().defaultGenerator(input.defined() ? input.device() : at::Device(at::kCPU));
}

at::Tensor generator_state(at::Generator& generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_generator_state(at::Generator& generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// The module's buffers (batch-norm statistics, counters) as copies, so the recompute's second update of them can be
// undone: the forward's update is the one that counts, as in an unsharded step.
std::vector<std::pair<at::Tensor, at::Tensor>> snapshot_buffers(const torch::nn::Module& module) {
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  for (const at::Tensor& buffer : module.buffers())
    if (buffer.defined()) out.emplace_back(buffer, buffer.clone());
  return out;
}

class UnitFunction : public torch::autograd::Function<UnitFunction> {
 public:
  // `anchor` requires a gradient, so the backward runs even when the input needs none (the model's first unit).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, const at::Tensor& anchor,
                            c10::intrusive_ptr<UnitCall> call) {
    ctx->save_for_backward({input});
    ShardedStep& step = *call->step;
    step.gather_unit(call->unit);
    at::Tensor output;
    try {
      output = call->forward(input);
    } catch (...) {
      step.release_unit(call->unit);
      throw;
    }
    step.release_unit(call->unit);
    ctx->saved_data["call"] = at::IValue::make_capsule(std::move(call));
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto held = ctx->saved_data["call"].toCapsule();  // keeps the call alive through the backward
    auto* call = static_cast<UnitCall*>(held.get());
    const at::Tensor input = ctx->get_saved_variables()[0];
    ShardedStep& step = *call->step;
    at::Tensor x = input.detach();
    const bool input_grad = input.requires_grad() && c10::isFloatingType(input.scalar_type());
    x.requires_grad_(input_grad);
    step.gather_unit(call->unit);
    try {
      // Restored after the backward, which may read them (batch norm keeps its statistics for its backward).
      auto buffers = snapshot_buffers(*call->module);
      at::Tensor output;
      {
        const at::Tensor now = generator_state(call->generator);
        set_generator_state(call->generator, call->generator_state);
        std::shared_ptr<void> context = call->context ? call->context() : nullptr;
        at::AutoGradMode enable(true);
        output = call->forward(x);
        context.reset();
        set_generator_state(call->generator, now);
      }
      at::Tensor grad = grads[0].defined() ? grads[0] : at::zeros_like(output);
      if (output.requires_grad()) torch::autograd::backward({output}, {grad});
      {
        c10::NoGradGuard no_grad;
        for (auto& [buffer, before] : buffers) buffer.copy_(before);
      }
      step.reduce_unit(call->unit);
    } catch (...) {
      step.release_unit(call->unit);
      throw;
    }
    step.release_unit(call->unit);
    return {input_grad ? x.grad() : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::size_t ShardedStep::unit_index(const torch::nn::Module& module) const {
  for (std::size_t u = 0; u < unit_specs_.size(); ++u)
    if (unit_specs_[u].module == &module) return u;
  throw Error("sharded step: run_unit of a module that is not one of this run's units");
}

at::Tensor ShardedStep::run(const torch::nn::Module& module, const UnitForward& forward, const at::Tensor& input) {
  const std::size_t u = unit_index(module);
  UnitState& unit = unit_state_[u];
  ++unit.runs;
  // Held whole (gather_units, or a nested call inside its own recompute): nothing to gather.
  if (unit.whole) return forward(input);
  if (!c10::GradMode::is_enabled()) {
    gather_unit(u);
    try {
      at::Tensor output = forward(input);
      release_unit(u);
      return output;
    } catch (...) {
      release_unit(u);
      throw;
    }
  }
  auto call = c10::make_intrusive<UnitCall>();
  call->step = this;
  call->unit = u;
  call->module = &module;
  call->forward = forward;
  call->generator = generator_for(input);
  call->generator_state = generator_state(call->generator);
  if (recompute_context_) call->context = recompute_context_();
  // A scalar leaf per call: requires a gradient, so autograd runs the unit's backward; its own gradient is none.
  at::Tensor anchor = at::empty({0}, parameters_.front().options().requires_grad(false)).requires_grad_(true);
  return UnitFunction::apply(input, anchor, std::move(call));
}

void ShardedStep::gather_unit(std::size_t u, bool values) {
  UnitState& unit = unit_state_.at(u);
  if (unit.whole) return;
  c10::NoGradGuard no_grad;
  for (std::size_t i : unit.slots) {
    const Slot& slot = layout_.slots()[i];
    // In the memory format it had when released (channels_last stays so).
    parameters_[i].set_data(at::empty(slot.shape, parameters_[i].options().requires_grad(false)
                                                      .memory_format(memory_formats_[i])));
  }
  unit.whole = true;  // from here on its tensors have their shapes: a failed gather still releases them
  if (!values) return;
  for (std::size_t b : unit.buckets) {
    const Bucket& bucket = buckets_[b];
    if (bucket.numel() == 0) continue;
    at::Tensor shard = own_part(b);
    at::Tensor gathered = communicator_ ? communicator_->all_gather(shard) : shard;
    layout_.unpack_into(gathered, parameters_, bucket);
  }
}

void ShardedStep::release_unit(std::size_t u) {
  UnitState& unit = unit_state_.at(u);
  if (!released_ || !unit.whole) return;  // held whole outside training (before release_units, after gather_units)
  c10::NoGradGuard no_grad;
  for (std::size_t i : unit.slots) {
    memory_formats_[i] = parameters_[i].suggest_memory_format();
    parameters_[i].mutable_grad() = at::Tensor();
    parameters_[i].set_data(at::empty({0}, parameters_[i].options().requires_grad(false)));
  }
  unit.whole = false;
}

void ShardedStep::reduce_unit(std::size_t u) {
  UnitState& unit = unit_state_.at(u);
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> grads(parameters_.size());
  for (std::size_t i : unit.slots) grads[i] = dense_grad(i);
  for (std::size_t b : unit.buckets) {
    const Bucket& bucket = buckets_[b];
    if (bucket.numel() == 0) continue;
    at::Tensor mine = reduce_bucket(bucket, grads, /*release=*/true);
    // Added: microbatches' backwards each add their part, as gradients accumulate.
    grad_buffer(dtype_index(bucket.dtype)).narrow(0, bucket.begin, bucket.numel()).add_(mine);
  }
}

void ShardedStep::release_units() {
  if (stage_ != ZeroStage::zero3 || released_) return;
  released_ = true;
  for (std::size_t u = 0; u < unit_state_.size(); ++u) release_unit(u);
}

void ShardedStep::gather_units(bool values) {
  if (!released_) return;
  for (std::size_t u = 0; u < unit_state_.size(); ++u) gather_unit(u, values);
  released_ = false;
}

}  // namespace baton::sharding
