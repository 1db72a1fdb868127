#pragma once
// An exponential moving average of a model's weights, usable on its own in any LibTorch loop (like ema-pytorch or
// NeMo's EMAManager) and the engine of the `ema` plugin:
//
//   baton::EmaOptions options;  options.smoothing = 0.999;
//   baton::ExponentialMovingAverage ema(*model, options);
//   for (...) { loss.backward(); optimizer.step(); ema.update(*model); }
//   { baton::EmaSwapGuard guard(ema, *model); evaluate(model); }   // EMA weights in, raw weights back (bitwise);
//                                                                   // the model in eval mode meanwhile
//   auto weights = ema.state_dict();                                // the EMA weights by name, as copies
//
// For every averaged tensor:  ema <- s * ema + (1 - s) * w   (s = smoothing, 0 <= s <= 1).
// Integer buffers (BatchNorm's num_batches_tracked) are always copied, never averaged; floating buffers are averaged
// or copied (EmaOptions::buffers); names matching an `exclude` glob are copied. The EMA never enters autograd.
// The update is one fused pass over every tensor in a single parallel region on CPU (bf16/fp16 weights converted
// to an fp32 EMA on the fly); on a GPU, one multi-tensor lerp per dtype (LibTorch 2.x; one op per tensor on 1.13),
// queued without a host synchronisation.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/export.h"
#include "baton/model_tensors.h"
#include "baton/state_dict.h"

namespace torch::nn {
class Module;
}

namespace baton {

class Communicator;  // baton/communicator.h

enum class EmaBuffers { average, copy };

struct EmaOptions {
  double smoothing = 0.999;                  // s; must lie in [0, 1]
  EmaBuffers buffers = EmaBuffers::average;  // floating buffers; integer buffers are always copied
  std::vector<std::string> exclude;          // glob patterns ('*', '?') of names copied instead of averaged
  bool float32 = false;                      // keep an fp32 EMA of bf16/fp16 weights (otherwise the weights' dtype)
  std::string device;                        // "" = the model's device; "cpu" keeps the EMA in host memory
  int threads = 0;                           // CPU update threads; 0 = one per core (OMP_NUM_THREADS if set)
  /// Shards the EMA over a data-parallel run's ranks, whose weights are identical: each rank keeps only its rows
  /// of each floating-point tensor (FSDP2's Shard(0): ceil(rows / W) rows per rank as torch.chunk splits them, the
  /// layout of a sharded run's parameters) and updates them with no communication. Calls
  /// that need the whole EMA — swap, copy_to, state_dict — gather it (one allgather) and are collectives: every
  /// rank must make them. Null: the whole EMA on this process.
  std::shared_ptr<Communicator> shard_over;
  /// The weights that exist only as this rank's rows at the time of a call (a run sharded zero3: RunFacts::
  /// held_rows): the update reads those rows, swap() exchanges them with the EMA's rows in place (no gather) and
  /// copy_to writes them, instead of the model's emptied tensors; reset takes their shapes. Over several ranks the
  /// EMA must then be sharded (shard_over): a rank has no other rows to average. Null, or empty: none.
  std::function<std::vector<HeldRows>()> held_rows;
};

class BATON_API ExponentialMovingAverage {
 public:
  /// An empty EMA; reset(model) fills it.
  explicit ExponentialMovingAverage(EmaOptions options = {});
  /// An EMA initialised from the model's current parameters and buffers.
  ExponentialMovingAverage(const torch::nn::Module& model, EmaOptions options = {});
  ~ExponentialMovingAverage();
  ExponentialMovingAverage(ExponentialMovingAverage&&) noexcept;
  ExponentialMovingAverage& operator=(ExponentialMovingAverage&&) noexcept;

  /// (Re)initialises the average from the model's current parameters and buffers (a copy).
  void reset(const torch::nn::Module& model);
  bool initialized() const;

  /// One update with options().smoothing, or with `smoothing` (e.g. a warmup schedule's value).
  void update(const torch::nn::Module& model);
  void update(const torch::nn::Module& model, double smoothing);

  /// Exchanges the model's weights and buffers with the EMA in place (no second model). Calling it again puts the
  /// raw weights back bitwise identical. Between the two calls the model holds the EMA (in the model's dtype).
  /// Sharded: swapping in gathers the whole EMA for the swap's duration (every rank must swap); what the model
  /// does to those weights is dropped when they are swapped back.
  void swap(torch::nn::Module& model);
  /// While swapped, update, copy_to, reset, to and load_state_dict throw baton::Error (swap back first); get and
  /// state_dict still return the EMA.
  /// Whether the model currently holds the EMA weights (an odd number of swap calls).
  bool swapped() const;

  /// Copies the EMA into the model (its own weights are overwritten).
  void copy_to(torch::nn::Module& model) const;

  /// Moves the EMA to a device ("cpu", "cuda:0"); by default it lives where the model does.
  void to(const std::string& device);
  std::string device() const;

  bool contains(const std::string& name) const;
  /// Number of tensors (parameters and buffers) kept.
  std::size_t size() const;
  std::vector<std::string> names() const;
  /// Bytes held by the average on this process (about full_bytes() / W when sharded).
  std::int64_t bytes() const;
  /// Bytes of the whole average.
  std::int64_t full_bytes() const;
  /// Whether each rank holds only its rows (EmaOptions::shard_over).
  bool sharded() const;
  /// The EMA tensor of a parameter or buffer (shared, not a copy). Throws baton::Error naming an unknown name, or
  /// a sharded tensor outside a swap (state_dict() gathers those).
  at::Tensor get(const std::string& name) const;

  /// Caller-owned copies of every EMA tensor under the model's names: the EMA weights for a program (write them
  /// with baton::write_safetensors, which baton::load_safetensors_into reads into a module of the same layout;
  /// or copy_to). Sharded: a collective that gathers them.
  std::vector<std::pair<std::string, at::Tensor>> state_dict() const;
  /// Replaces the EMA with `state`, checking names, shapes and dtypes against the EMA's layout (which needs an
  /// initialised EMA). strict: every kept tensor must be present and none extra. Throws baton::Error naming the
  /// offending tensor. Sharded: each rank takes its rows of the whole EMA, saved at any world size (no collective).
  void load_state_dict(const std::vector<std::pair<std::string, at::Tensor>>& state, bool strict = true);

  /// This rank's part of the average as row tensors of `out` (StateDict::set_rows, under prefix + name), with no
  /// communication, for a checkpoint each rank writes its own file of: sharded, its rows of every sharded tensor and
  /// (from rank 0 alone) the tensors every rank keeps whole; not sharded, every tensor whole.
  void save_rows(StateDict& out, const std::string& prefix = "") const;
  /// Whether `in` holds row tensors save_rows wrote (under prefix) rather than whole tensors.
  bool saved_as_rows(const StateDict& in, const std::string& prefix = "") const;
  /// Reads back what save_rows wrote at any world size: each rank only the rows it keeps (StateDict::read_rows), the
  /// tensors kept whole whole. Every tensor must be there, of the EMA's global shape and dtype; throws baton::Error
  /// naming the tensor, leaving the EMA as it was. No collective.
  void load_rows(const StateDict& in, const std::string& prefix = "");

  const EmaOptions& options() const;
  void set_smoothing(double smoothing);  // throws baton::Error outside [0, 1]

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// How an EmaSwapGuard leaves the model's training mode for its scope.
enum class EmaGuardMode {
  eval,  // model.eval() for the scope, the previous mode back after it (the default: evaluation)
  keep,  // the mode as it is: a train-mode forward writes BatchNorm's running statistics into the EMA (below)
};

/// Puts the EMA weights into the model for its lifetime and the raw weights back when it ends (also on exceptions).
/// If the EMA is already swapped in when the guard is made, the guard leaves it as it is.
///
/// The swapped-in tensors ARE the EMA's: whatever the model writes to its parameters or buffers in the scope is
/// written into the EMA and stays there after the swap back. A forward in training mode does that to BatchNorm's
/// running_mean, running_var and num_batches_tracked, so by default the guard puts the model in evaluation mode
/// for its scope (and restores the mode it found); EmaGuardMode::keep leaves the mode to the caller.
class BATON_API EmaSwapGuard {
 public:
  EmaSwapGuard(ExponentialMovingAverage& ema, torch::nn::Module& model, EmaGuardMode mode = EmaGuardMode::eval);
  ~EmaSwapGuard();
  EmaSwapGuard(const EmaSwapGuard&) = delete;
  EmaSwapGuard& operator=(const EmaSwapGuard&) = delete;

 private:
  ExponentialMovingAverage& ema_;
  torch::nn::Module& model_;
  bool swapped_ = false;
  bool restore_training_ = false;  // the model was in training mode and the guard put it in evaluation mode
};

/// s = 2^(-interval / half_life); a half life of 0 gives 0 (no averaging: the EMA equals the weights).
BATON_API double smoothing_from_half_life(double half_life, double interval = 1);
/// The half life (in the unit of `interval`) of a per-update smoothing: interval * ln 2 / -ln s; s = 0 gives 0,
/// s = 1 infinity.
BATON_API double half_life_from_smoothing(double smoothing, double interval = 1);

}  // namespace baton
