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
// Stages (zero1 and zero2 keep the full parameters on every rank between steps, so forward and backward run
// unchanged):
//   zero1: the optimizer state is sharded. The model's full .grad is kept after the reduce, as this rank's own
//          (not averaged) gradients, for consumers after the backward; zero_grad() releases it. FSDP has no name
//          for it.
//   zero2: the gradients too: the model's full .grad is released (set undefined) right after it is packed, so only
//          the shard's gradient outlives the reduce. FSDP1's SHARD_GRAD_OP; FSDP2's reshard_after_forward=False.
//   zero3: the parameters too: those of each unit (a sub-module, baton/unit.h) exist in full only while the unit
//          runs. The model's forward calls each unit through baton::run_unit, which all-gathers the unit's
//          parameters, runs its forward without recording a graph and releases them; in the backward the unit is
//          gathered again, its forward recomputed with a graph from its saved input (activation checkpointing at
//          unit granularity: the recompute replays the random generator, the autocast state through
//          set_recompute_context, and restores the buffers the forward updated), its gradients reduce-scattered
//          into the shard's gradient and released with the parameters. So a rank holds its shards plus one unit's
//          full parameters and gradients at a time (units nest: a parameter belongs to its innermost unit). The
//          parameters of no unit form the root, handled as zero2 (kept whole, reduced after the backward,
//          gathered after the step). A released parameter keeps its TensorImpl with an empty [0] tensor as data.
//          FSDP1's FULL_SHARD; FSDP2's reshard_after_forward=True. Each step moves 3 (W - 1) / W of the units'
//          parameter bytes per rank: two all-gathers and a reduce-scatter.
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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/model_tensors.h"
#include "sdk/unit_runner.h"
#include "sharding/layout.h"

namespace baton {
class Communicator;
}

namespace baton::sharding {

enum class ZeroStage { zero1, zero2, zero3 };

/// A zero3 unit: a sub-module under its dotted name in the model ("features.0"); its parameters are those named
/// "<name>.<...>".
struct UnitSpec {
  std::string name;
  const torch::nn::Module* module = nullptr;
};

/// "zero1", "zero2", "zero3".
const char* to_string(ZeroStage stage);

class ShardedStep : public detail::UnitRunner {
 public:
  /// `parameters`: the model's parameters in order, under their names (named_model_tensors(module, false)); they
  /// must hold the same values on every rank (the trainer broadcasts them first), be floating-point and share one
  /// device. `communicator`: the run's, lent for the object's lifetime; null for a world of one. Throws Error naming
  /// the parameter that is undefined, not floating-point, on another device, or named twice.
  /// `bucket_bytes`: a rank's part of each collective (the buckets above).
  /// `units` (zero3 only; others refuse them): the units, outermost first or in any order; each must own at least
  /// one sharded parameter (Error naming it otherwise). The step is built with the model whole; zero3 releases the
  /// units' parameters at release_units().
  ShardedStep(const NamedTensors& parameters, Communicator* communicator, ZeroStage stage,
              std::int64_t bucket_bytes = std::int64_t{25} << 20, std::vector<UnitSpec> units = {});
  ~ShardedStep() override;
  ShardedStep(const ShardedStep&) = delete;
  ShardedStep& operator=(const ShardedStep&) = delete;

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

  // --- zero3 ---
  const std::vector<UnitSpec>& units() const { return unit_specs_; }
  /// The unit each slot belongs to (an index into units()), -1 for the root.
  const std::vector<int>& unit_of_slot() const { return unit_of_slot_; }
  /// Whether the units' parameters are released (zero3 between release_units() and gather_units()).
  bool released() const { return released_; }
  /// While released: every unit's parameter as this rank's rows (views into the shards) with its global shape,
  /// what RunFacts::held_rows gives plugins; empty otherwise.
  std::vector<HeldRows> held_rows() const;
  /// Frees the full parameters of every unit (they live on in the shards): after load_parameters(), before
  /// training. A no-op for zero1 / zero2 and when released already.
  void release_units();
  /// Makes every unit's parameters whole again, all-gathering their values (or, with `values` false, allocating
  /// them only, for a caller that overwrites them and then calls load_parameters()). For what needs the whole
  /// model outside a step: exporting it, a model whose forward does not run its units through run_unit. A no-op
  /// unless released.
  void gather_units(bool values = true);
  /// What a unit's recompute must run under that its forward ran under, beyond the random generator (the trainer's
  /// autocast): called at each unit's forward, the function returned is called before the recompute and the
  /// object it returns is destroyed after it.
  using RecomputeContext = std::function<std::function<std::shared_ptr<void>()>()>;
  void set_recompute_context(RecomputeContext capture) { recompute_context_ = std::move(capture); }
  /// How many times each unit ran forward (training or not) since construction: lets a caller tell a unit that
  /// the model's forward never runs through run_unit.
  std::int64_t unit_runs(std::size_t unit) const { return unit_state_.at(unit).runs; }

  /// detail::UnitRunner: run_unit of one of this step's units (zero3).
  at::Tensor run(const torch::nn::Module& module, const UnitForward& forward, const at::Tensor& input) override;

  // The pieces of a unit's forward and backward (units.cpp), public for the autograd node that calls them.
  void gather_unit(std::size_t unit, bool values = true);
  void release_unit(std::size_t unit);
  /// Reduce-scatters the unit's gradients (mean) and adds them to the shard parameters' gradients; then releases
  /// the unit's full gradients.
  void reduce_unit(std::size_t unit);

 private:
  ZeroStage stage_;
  Communicator* communicator_;
  std::vector<at::Tensor> parameters_;  // the model's own tensors, one per slot
  Layout layout_;
  std::vector<Bucket> buckets_;
  std::vector<at::Tensor> shards_;  // beside layout_.dtypes()

  struct UnitState {
    std::vector<std::size_t> slots;    // the slots it owns
    std::vector<std::size_t> buckets;  // the buckets holding them (whole buckets: they break at unit boundaries)
    bool whole = true;                 // its parameters hold their full values
    std::int64_t runs = 0;
  };
  std::vector<UnitSpec> unit_specs_;
  std::vector<int> unit_of_slot_;
  std::vector<int> unit_of_bucket_;  // -1: the root's
  std::vector<UnitState> unit_state_;
  std::vector<at::MemoryFormat> memory_formats_;  // each slot's, recorded when its unit is released
  bool released_ = false;
  RecomputeContext recompute_context_;

  std::size_t unit_index(const torch::nn::Module& module) const;
  /// Parameter i's gradient, zeros when it has none; throws Error naming a sparse one.
  at::Tensor dense_grad(std::size_t i) const;
  /// One bucket of `grads` packed and reduce-scattered (mean): this rank's part. `release`: the bucket's full
  /// gradients (in `grads` and on the model) are dropped before the collective.
  at::Tensor reduce_bucket(const Bucket& bucket, std::vector<at::Tensor>& grads, bool release);
  std::size_t dtype_index(at::ScalarType dtype) const;
  /// The shard parameter's gradient of `dtype`, allocated as zeros when undefined.
  at::Tensor& shard_grad(std::size_t dtype_index);
};

}  // namespace baton::sharding
