#pragma once
// The ZeRO-1 / ZeRO-2 step over the layout (layout.h): each rank keeps the optimizer state of its shard only.
//
//   backward (the model's full .grad)  ->  reduce_gradients(): pack, one reduce-scatter (mean) per bucket; the
//   results make the .grad of the rank's shard parameters  ->  optimizer.step() over the shard parameters  ->
//   gather_parameters(): one all-gather per bucket, unpacked into the model's parameters in place.
//
// A bucket is a run of consecutive slots of one dtype of about `bucket_bytes` per rank (Layout::buckets; DDP's
// 25 MB by default), so the buffers the collectives need (the packed gradients, W times a bucket; the gathered
// parameters, likewise) are a bucket's size rather than the model's, and zero2 releases each bucket's full
// gradients as soon as they are packed. Every element is reduced and gathered exactly as with one bucket per dtype.
//
// The rank's shard of the parameters is held as ONE flat leaf tensor per dtype (the layout's buffer, padding
// included), so the optimizer is built over those few tensors with any factory taking std::vector<at::Tensor>
// (OptimizerFactory in baton/components.h) and its state (momentum, Adam's moments) exists for the shard alone.
// That is exact for element-wise optimizers (SGD with momentum, weight decay and Nesterov; Adam, AdamW): each
// element's update reads only that element's parameter, gradient and state, so one flat tensor steps every element
// as the per-tensor optimizer would. It is NOT exact for optimizers that use a per-tensor norm (LAMB's trust ratio,
// LARS): over a flat shard they would take the norm of many tensors' pieces at once, and even over one tensor's
// shard the norm would be the local piece's, not the tensor's.
//
// The padding elements of each shard parameter start at 0 and stay exactly 0: their gradient is always 0 (pack()
// zeroes the padding on every rank, so the reduce-scatter sums zeros), an element-wise optimizer's state for them
// stays 0 (momentum and moments of zero gradients), and weight decay is proportional to the parameter itself
// (SGD's g + wd * p, Adam's coupled or AdamW's decoupled p * (1 - lr * wd)), so 0 decays to 0. A norm or sum over a
// whole shard buffer thus counts real elements only.
//
// Stages (both keep the full parameters on every rank between steps, so forward and backward run unchanged):
//   zero1: the optimizer state is sharded. The model's full .grad is kept after the reduce, as this rank's own
//          (not averaged) gradients, for consumers after the backward; zero_grad() releases it. FSDP has no name
//          for it.
//   zero2: the gradients too: the model's full .grad is released (set undefined) right after it is packed, so only
//          the shard's gradient outlives the reduce. FSDP1's SHARD_GRAD_OP; FSDP2's reshard_after_forward=False.
//
// What is sharded: the parameters given that require a gradient. Those that do not (frozen) are left out of the
// layout: they are never stepped, so they need no shard, and gather_parameters() never writes them. The set is fixed
// at construction. A parameter that requires a gradient but got none in a step (an unused branch) counts as a zero
// gradient on that rank, as in FSDP: unlike an unsharded torch optimizer, which skips a parameter without a .grad,
// the step still applies momentum and weight decay to it.
//
// World size 1 (no communicator) is a passthrough with the same arithmetic and no collective: the rank's shard is
// the whole model, its gradients are the model's (the mean over one rank), and the "gather" copies the shard back.
// So a run configured for zero1/zero2 behaves the same when launched as one process, and the single-process path is
// tested like the others.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/model_tensors.h"
#include "sharding/layout.h"

namespace baton {
class Communicator;
}

namespace baton::sharding {

enum class ZeroStage { zero1, zero2 };

/// "zero1", "zero2".
const char* to_string(ZeroStage stage);

class ShardedStep {
 public:
  /// `parameters`: the model's parameters in order, under their names (named_model_tensors(module, false)); they
  /// must hold the same values on every rank (the trainer broadcasts them first), be floating-point and share one
  /// device. `communicator`: the run's, lent for the object's lifetime; null for a world of one. Throws Error naming
  /// the parameter that is undefined, not floating-point, on another device, or named twice.
  /// `bucket_bytes`: a rank's part of each collective (the buckets above).
  ShardedStep(const NamedTensors& parameters, Communicator* communicator, ZeroStage stage,
              std::int64_t bucket_bytes = std::int64_t{25} << 20);

  ZeroStage stage() const { return stage_; }
  const Layout& layout() const { return layout_; }
  /// The buckets each collective moves, in order (every dtype's buffer is covered).
  const std::vector<Bucket>& buckets() const { return buckets_; }
  /// The model's sharded parameters (those requiring a gradient), in the layout's order.
  const std::vector<at::Tensor>& model_parameters() const { return parameters_; }

  /// This rank's shards of the parameters: one flat leaf tensor per dtype, in layout().dtypes() order, of
  /// layout().buffer_numel(dtype) elements (padding included). Build the optimizer over these.
  const std::vector<at::Tensor>& shard_parameters() const { return shards_; }
  /// The shard parameter of `dtype`; throws Error when no sharded parameter has that dtype.
  const at::Tensor& shard_parameter(at::ScalarType dtype) const;
  /// Parameter `name`'s rows held by this rank, as a view into its shard parameter (of Slot::shard_shape()).
  at::Tensor shard_of(const std::string& name) const;

  /// Copies this rank's rows of the model's current parameters into the shard parameters (padding stays 0): after
  /// the model's values were replaced outside the step (the trainer's broadcast of rank 0's, a loaded checkpoint).
  void load_parameters();
  /// After the backward: packs the model's gradients (an undefined .grad as zeros) bucket by bucket,
  /// reduce-scatters each with the mean over the ranks (one collective per bucket) into the .grad of the shard
  /// parameters, replacing any gradient they held. zero2 releases the model's .grad right after packing it.
  void reduce_gradients();
  /// After the optimizer stepped the shard parameters: all-gathers the shard parameters bucket by bucket (one
  /// collective per bucket) and writes the full values into the model's parameters in place, so every parameter keeps its
  /// TensorImpl, storage and autograd identity (modules, hooks and views of it stay valid).
  void gather_parameters();
  /// Releases the gradients of the shard parameters and of the model's sharded parameters (sets them undefined).
  /// Where the trainer zeroes the optimizer's gradients before a backward: an optimizer over the shard parameters
  /// no longer sees the model's, and under zero1 they would otherwise accumulate over steps.
  void zero_grad();

 private:
  ZeroStage stage_;
  Communicator* communicator_;
  std::vector<at::Tensor> parameters_;  // the model's own tensors, one per slot
  Layout layout_;
  std::vector<Bucket> buckets_;
  std::vector<at::Tensor> shards_;  // beside layout_.dtypes()
};

}  // namespace baton::sharding
