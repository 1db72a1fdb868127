#pragma once
// The ZeRO-1 / ZeRO-2 / ZeRO-3 step over the layout (layout.h): each rank keeps the optimizer state of its shard only.
//
//   backward (the model's full .grad)  ->  each bucket reduce-scattered (mean) as soon as the backward has produced
//   its gradients (reduce_during_backward), the rest by reduce_gradients(); the results make the .grad of the
//   rank's shard parameters  ->  optimizer.step() over the shard parameters  ->  gather_parameters(): one
//   all-gather per bucket, unpacked into the model's parameters in place.
//
// A bucket is a run of consecutive slots of one dtype whose collective moves about `bucket_bytes` (the whole
// bucket, every rank's part: DDP's bucket_cap_mb, 25 MB by default; Layout::buckets), so the buffers a collective
// needs are a bucket's size rather than the model's, and zero2 releases each bucket's full gradients as soon as
// they are packed. Kept at most 25 MB, those buffers come back from the C library's heap on every step instead of
// being mapped afresh (glibc maps an allocation above 32 MB anew each time: a page fault per 4 KiB, measured at
// 1.7 GB/s here against 9 GB/s for a copy into memory already touched). Every element is reduced and gathered
// exactly as with one bucket per dtype.
//
// The optimizer steps one leaf tensor per parameter (shard_parameters()), this rank's rows of it, so it keeps
// state (momentum, Adam's moments) for those rows alone, under the parameter's name, as an unsharded optimizer
// keeps it per tensor. Under zero1 and zero2 that leaf IS the rows of the model's own parameter (an alias of its
// storage, no copy): the model holds its parameters whole between steps anyway, so a separate copy of the shard
// would only add 4/W bytes per parameter. Under zero3 the units' shards live in one flat buffer per dtype (the
// layout's, padding included; the only copy of a released unit) and the leaves are views into it. The shard
// gradients are views into one flat buffer per dtype (zero2, zero3) or the rows of the model's full gradient
// (zero1, which keeps it whole). That is exact for element-wise optimizers (SGD with momentum, weight decay and
// Nesterov; Adam, AdamW): each element's update reads only that element's parameter, gradient and state. It is
// NOT exact for optimizers that use a per-tensor norm (LAMB's trust ratio, LARS): over a shard they would take the
// norm of the rank's rows, not the tensor's.
//
// Reducing in the backward: with reduce_during_backward(true) a hook after each parameter's gradient accumulation
// counts the bucket's gradients, and a bucket whose gradients are all there is reduce-scattered at once (zero2
// then releases them), so the whole model's gradients never exist at once. Buckets are reduced in one fixed order
// (the last first, as the backward produces them): a bucket waits for those after it, so every rank issues the same
// collectives in the same order even where a rank's graph leaves a parameter without a gradient; what the backward
// did not complete, reduce_gradients() reduces after it, in the same order.
//
// Stages (zero1 and zero2 keep the full parameters on every rank between steps, so forward and backward run
// unchanged):
//   zero1: the optimizer state is sharded. The model's full .grad is kept after the reduce: this rank's rows of it
//          hold the mean over the ranks (they are the shard's gradient), the other rows this rank's own
//          gradients; zero_grad() releases it. FSDP has no name for it.
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
#include <deque>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/communicator.h"
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
  /// `bucket_bytes`: what each collective moves, every rank's part together (the buckets above).
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

  /// This rank's shards of the parameters: one leaf tensor per parameter of which this rank holds rows (a rank may
  /// hold none of a small one), of Slot::shard_shape(), in the layout's order. Build the optimizer over these.
  const std::vector<at::Tensor>& shard_parameters() const { return shard_params_; }
  /// Those parameters' names (shard_parameters() beside them), as the optimizer's state is exported.
  NamedTensors named_shard_parameters() const;
  /// Parameter `name`'s rows held by this rank (of Slot::shard_shape(); [0, ...] where it holds none), detached:
  /// for reading and writing values (the EMA, a checkpoint) outside the optimizer's autograd.
  at::Tensor shard_of(const std::string& name) const;

  /// After the model's values were replaced outside the step (the trainer's broadcast of rank 0's, a loaded
  /// checkpoint): zero3 copies this rank's rows of the units into its shards; zero1, zero2 and the root's rows alias
  /// the model's parameters and follow them; a parameter given new storage (set_data: channels_last at fit_start)
  /// is followed here and at the start of each step's reduce (reduce_during_backward, reduce_gradients).
  void load_parameters();
  /// Arms (true) or disarms the reduce of each bucket as soon as the backward has produced its gradients (zero1,
  /// zero2; zero3 reduces its units in their own backward and its root after it). For a step's last backward: with
  /// microbatches, the earlier backwards accumulate the model's gradients unreduced. reduce_gradients() disarms it.
  void reduce_during_backward(bool armed);
  /// After the backward: reduce-scatters, with the mean over the ranks, every bucket the backward has not (an
  /// undefined .grad counting as zeros), one collective per bucket, into the .grad of the shard parameters. zero2
  /// releases the model's .grad right after packing it.
  void reduce_gradients();
  /// After the optimizer stepped the shard parameters: all-gathers the shard parameters bucket by bucket (one
  /// collective per bucket) and writes the full values into the model's parameters in place, so every parameter keeps its
  /// TensorImpl, storage and autograd identity (modules, hooks and views of it stay valid).
  void gather_parameters();
  /// Releases the gradients of the shard parameters and of the model's sharded parameters (sets them undefined).
  /// Where the trainer zeroes the optimizer's gradients before a backward: an optimizer over the shard parameters
  /// no longer sees the model's, and under zero1 they would otherwise accumulate over steps. zero2 and zero3 keep the
  /// memory behind the shard gradients for the next step's.
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
  std::vector<at::Tensor> storage_;       // zero3: the units' shards, one flat buffer beside layout_.dtypes()
  std::vector<at::Tensor> grad_buffers_;  // zero2, zero3: the flat shard gradients, beside layout_.dtypes()
  std::vector<char> grads_live_;          // beside them: the shard parameters' .grad are views of it this step
  std::vector<at::Tensor> shard_params_;  // the leaves the optimizer steps
  std::vector<std::size_t> slot_of_shard_;
  std::vector<int> shard_of_slot_;  // index into shard_params_, -1 where this rank holds no rows

  // The reduce in the backward (zero1, zero2).
  std::vector<int> bucket_of_slot_;    // -1 for a slot of no elements
  std::vector<int> pending_;           // per bucket: its slots' gradients not yet accumulated by this backward
  std::vector<char> reduced_;          // per bucket: reduced this step
  std::size_t unreduced_ = 0;          // buckets [0, unreduced_) wait: the ones after are reduced
  bool armed_ = false;
  // Reduces started in the backward and not yet finished (at most one: it runs while the backward computes the
  // next bucket's gradients), oldest first.
  struct InFlight {
    std::size_t bucket = 0;
    std::vector<at::Tensor> grads;  // the bucket's full gradients, by slot (zero1 writes its rows into them)
    PendingReduceScatter reduce;
    at::Tensor local;  // over one rank, no collective: the packed bucket is the mean
  };
  std::deque<InFlight> in_flight_;
  struct Hook;
  std::shared_ptr<ShardedStep*> self_;  // the hooks hold it weakly
  std::vector<std::shared_ptr<void>> accumulators_;  // each parameter's gradient accumulator, kept alive
  std::vector<std::pair<void*, std::uintptr_t>> hooks_;  // (accumulator node, hook key)

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
  /// Parameter i's gradient, zeros when it has none; throws Error naming a sparse one. zero1 keeps the zeros as the
  /// model's .grad, whose rows are the shard's gradient.
  at::Tensor dense_grad(std::size_t i);
  /// One bucket of `grads` packed and reduce-scattered (mean): this rank's part. `release`: the bucket's full
  /// gradients (in `grads` and on the model) are dropped before the collective.
  at::Tensor reduce_bucket(const Bucket& bucket, std::vector<at::Tensor>& grads, bool release);
  /// One bucket of `grads` packed for its reduce-scatter; `release` as above.
  at::Tensor pack_bucket(const Bucket& bucket, std::vector<at::Tensor>& grads, bool release);
  /// Waits for the oldest reduce in flight and puts this rank's part where the step reads it.
  void finish_reduce();
  void finish_reduces();
  /// Starts bucket b's reduce (zero1, zero2, zero3's root) into the shard gradients, after finishing the one before
  /// it, and marks it done for this step.
  void reduce_now(std::size_t b);
  /// A parameter's gradient was accumulated by the backward (the hook): reduces the buckets now complete, in order.
  void gradient_ready(std::size_t slot);
  /// This rank's part of bucket b's current parameter values ([b.numel()], padding zeroed): what it all-gathers.
  at::Tensor own_part(std::size_t b) const;
  std::size_t dtype_index(at::ScalarType dtype) const;
  /// The flat shard gradient of dtype k (zero2, zero3), with every shard parameter's .grad a view of it from its
  /// first use in a step (allocated once, zeroed for zero3).
  at::Tensor& grad_buffer(std::size_t dtype_index);
  /// Every bucket waits for its gradients again (the start of a step's backward).
  void reset_backward();
  /// Re-aliases each leaf that is the rows of a model parameter (zero1, zero2, zero3's root) to the parameter's
  /// current storage, where it was given new storage (set_data): the same leaf, which the optimizer holds.
  void follow_parameters();
  void add_hooks();
  void remove_hooks();
};

}  // namespace baton::sharding
