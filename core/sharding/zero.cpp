#include "sharding/zero.h"

#include <algorithm>
#include <utility>

#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include "baton/communicator.h"
#include "baton/error.h"

namespace baton::sharding {
namespace {

bool sharded(const at::Tensor& parameter) { return parameter.requires_grad(); }

// The tensors to shard (defined, floating-point, on one device), checked before the layout is built so an error
// names the parameter rather than a slot.
std::vector<TensorSpec> specs_of(const NamedTensors& parameters) {
  std::vector<TensorSpec> specs;
  const std::pair<std::string, at::Tensor>* first = nullptr;  // the first sharded parameter, for its device
  for (const auto& item : parameters) {
    const auto& [name, tensor] = item;
    if (!tensor.defined()) throw Error("sharded step: the parameter '" + name + "' is undefined");
    if (!sharded(tensor)) continue;
    if (!c10::isFloatingType(tensor.scalar_type()))
      throw Error("sharded step: the parameter '" + name + "' is " + c10::toString(tensor.scalar_type()) +
                  ", not floating-point: it has no gradient to reduce");
    if (tensor.is_sparse())
      throw Error("sharded step: the parameter '" + name + "' is sparse; only dense parameters are sharded");
    if (!first) first = &item;
    if (tensor.device() != first->second.device())
      throw Error("sharded step: the parameter '" + name + "' is on " + tensor.device().str() + " but '" +
                  first->first + "' is on " + first->second.device().str() +
                  "; every sharded parameter must be on one device");
    specs.push_back({name, tensor.sizes().vec(), tensor.scalar_type()});
  }
  return specs;
}

std::vector<at::Tensor> sharded_tensors(const NamedTensors& parameters) {
  std::vector<at::Tensor> out;
  for (const auto& item : parameters)
    if (item.second.defined() && sharded(item.second)) out.push_back(item.second);
  return out;
}

// Each slot's unit: the innermost unit whose name prefixes the parameter's ("features.0" owns
// "features.0.weight", not "features.01.weight"), -1 for the root.
std::vector<int> units_of(const Layout& layout, const std::vector<UnitSpec>& units) {
  std::vector<int> out;
  for (const Slot& slot : layout.slots()) {
    int best = -1;
    for (std::size_t u = 0; u < units.size(); ++u) {
      const std::string& prefix = units[u].name;
      const bool inside = slot.name.size() > prefix.size() && slot.name.compare(0, prefix.size(), prefix) == 0 &&
                          slot.name[prefix.size()] == '.';
      if (inside && (best < 0 || prefix.size() > units[static_cast<std::size_t>(best)].name.size()))
        best = static_cast<int>(u);
    }
    out.push_back(best);
  }
  return out;
}

}  // namespace

const char* to_string(ZeroStage stage) {
  switch (stage) {
    case ZeroStage::zero1: return "zero1";
    case ZeroStage::zero2: return "zero2";
    case ZeroStage::zero3: return "zero3";
  }
  return "?";
}

// Runs after a parameter's gradient accumulator: the parameter's gradient for this backward is in its .grad. Holds
// the step weakly, so a hook that outlives it (an accumulator another graph still holds) does nothing.
struct ShardedStep::Hook : torch::autograd::FunctionPostHook {
  Hook(std::weak_ptr<ShardedStep*> step, std::size_t slot) : step(std::move(step)), slot(slot) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto alive = step.lock()) (*alive)->gradient_ready(slot);
    return outputs;
  }
  std::weak_ptr<ShardedStep*> step;
  std::size_t slot;
};

ShardedStep::ShardedStep(const NamedTensors& parameters, Communicator* communicator, ZeroStage stage,
                         std::int64_t bucket_bytes, std::vector<UnitSpec> units)
    : stage_(stage),
      communicator_(communicator),
      parameters_(sharded_tensors(parameters)),
      layout_(specs_of(parameters), communicator ? communicator->rank() : 0,
              communicator ? communicator->world_size() : 1),
      unit_specs_(std::move(units)) {
  if (!unit_specs_.empty() && stage_ != ZeroStage::zero3)
    throw Error(std::string("sharded step: units are zero3's; ") + to_string(stage_) + " keeps every parameter whole");
  for (std::size_t u = 0; u < unit_specs_.size(); ++u) {
    if (!unit_specs_[u].module) throw Error("sharded step: unit '" + unit_specs_[u].name + "' has no module");
    for (std::size_t v = 0; v < u; ++v)
      if (unit_specs_[v].name == unit_specs_[u].name || unit_specs_[v].module == unit_specs_[u].module)
        throw Error("sharded step: unit '" + unit_specs_[u].name + "' is given twice");
  }
  unit_of_slot_ = units_of(layout_, unit_specs_);
  memory_formats_.assign(unit_of_slot_.size(), at::MemoryFormat::Contiguous);
  unit_state_.resize(unit_specs_.size());
  for (std::size_t i = 0; i < unit_of_slot_.size(); ++i)
    if (unit_of_slot_[i] >= 0) unit_state_[static_cast<std::size_t>(unit_of_slot_[i])].slots.push_back(i);
  for (std::size_t u = 0; u < unit_specs_.size(); ++u)
    if (unit_state_[u].slots.empty())
      throw Error("sharded step: unit '" + unit_specs_[u].name + "' holds no parameter that trains (none is named '" +
                  unit_specs_[u].name + ".<...>' and requires a gradient), so it has nothing to shard");
  // A bucket's collective moves every rank's part of it: a rank's part is bucket_bytes / W.
  buckets_ = layout_.buckets(std::max<std::int64_t>(1, bucket_bytes / layout_.world_size()), unit_of_slot_);
  const auto& slots = layout_.slots();
  bucket_of_slot_.assign(slots.size(), -1);
  pending_.assign(buckets_.size(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    int unit = -1;
    for (std::size_t i = 0; i < slots.size(); ++i)
      if (Layout::in_bucket(slots[i], buckets_[b]) && slots[i].slot_numel() > 0) {
        unit = unit_of_slot_[i];
        bucket_of_slot_[i] = static_cast<int>(b);
        ++pending_[b];
      }
    unit_of_bucket_.push_back(unit);
    if (unit >= 0) unit_state_[static_cast<std::size_t>(unit)].buckets.push_back(b);
  }
  // zero3: the units' shards, a fresh copy of this rank's rows of the model's current values (padding zeroed). They
  // are equal on every rank only if the model is (the trainer broadcasts it before building this).
  if (stage_ == ZeroStage::zero3)
    for (at::ScalarType dtype : layout_.dtypes()) {
      std::size_t first = 0;
      while (slots[first].dtype != dtype) ++first;
      storage_.push_back(layout_.new_buffer(dtype, parameters_[first].device()));
      layout_.write_shards(parameters_, storage_.back());
    }
  grad_buffers_.resize(layout_.dtypes().size());
  grads_live_.assign(layout_.dtypes().size(), 0);
  shard_of_slot_.assign(slots.size(), -1);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].shard_numel() == 0) continue;
    shard_of_slot_[i] = static_cast<int>(shard_params_.size());
    slot_of_shard_.push_back(i);
    shard_params_.push_back(at::Tensor());
  }
  load_parameters();
  reset_backward();
  if (stage_ != ZeroStage::zero3) add_hooks();
  std::size_t registered = 0;
  try {
    for (; registered < unit_specs_.size(); ++registered) detail::register_unit(*unit_specs_[registered].module, *this);
  } catch (...) {
    for (std::size_t u = 0; u < registered; ++u) detail::unregister_unit(*unit_specs_[u].module, *this);
    remove_hooks();
    throw;
  }
}

ShardedStep::~ShardedStep() {
  for (const UnitSpec& unit : unit_specs_) detail::unregister_unit(*unit.module, *this);
  remove_hooks();
}

void ShardedStep::add_hooks() {
  self_ = std::make_shared<ShardedStep*>(this);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (bucket_of_slot_[i] < 0) continue;
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[i]);
    if (!accumulator) continue;
    torch::autograd::Node* node = accumulator.get();
    const std::uintptr_t key = node->add_post_hook(std::make_unique<Hook>(self_, i));
    hooks_.emplace_back(node, key);
    accumulators_.push_back(std::make_shared<decltype(accumulator)>(std::move(accumulator)));
  }
}

void ShardedStep::remove_hooks() {
  self_.reset();  // a hook still held elsewhere no longer reaches this object
  for (auto& [node, key] : hooks_) static_cast<torch::autograd::Node*>(node)->del_post_hook(key);
  hooks_.clear();
  accumulators_.clear();
}

std::size_t ShardedStep::dtype_index(at::ScalarType dtype) const {
  const auto& dtypes = layout_.dtypes();
  return static_cast<std::size_t>(std::find(dtypes.begin(), dtypes.end(), dtype) - dtypes.begin());
}

at::Tensor& ShardedStep::grad_buffer(std::size_t k) {
  at::Tensor& buffer = grad_buffers_[k];
  if (grads_live_[k]) return buffer;
  grads_live_[k] = 1;
  // Kept from step to step: a buffer of the shard's size allocated afresh each step would be mapped anew (above
  // 32 MB the C library maps each allocation, a page fault per 4 KiB). zero2 overwrites every bucket of it; zero3's
  // units add into it, so it starts from zeros.
  if (buffer.defined()) {
    if (stage_ == ZeroStage::zero3) buffer.zero_();
  } else {
    std::size_t first = 0;
    while (layout_.slots()[first].dtype != layout_.dtypes()[k]) ++first;
    buffer = layout_.new_buffer(layout_.dtypes()[k], parameters_[first].device());
  }
  // Views, detached: a plain tensor (not an autograd view) that an optimizer's zero_grad may detach in place.
  for (std::size_t s = 0; s < shard_params_.size(); ++s)
    if (layout_.slots()[slot_of_shard_[s]].dtype == layout_.dtypes()[k])
      shard_params_[s].mutable_grad() = layout_.shard_of_buffer(buffer, slot_of_shard_[s]).detach();
  return buffer;
}

NamedTensors ShardedStep::named_shard_parameters() const {
  NamedTensors out;
  for (std::size_t s = 0; s < shard_params_.size(); ++s)
    out.emplace_back(layout_.slots()[slot_of_shard_[s]].name, shard_params_[s]);
  return out;
}

at::Tensor ShardedStep::shard_of(const std::string& name) const {
  const std::size_t index = layout_.index_of(name);
  if (shard_of_slot_[index] >= 0) return shard_params_[static_cast<std::size_t>(shard_of_slot_[index])].detach();
  const Slot& slot = layout_.slots()[index];
  return at::empty(slot.shard_shape(), parameters_[index].options().requires_grad(false));
}

void ShardedStep::load_parameters() {
  if (released_)
    throw Error("sharded step: load_parameters: the units' parameters are released (zero3); gather_units() first");
  c10::NoGradGuard no_grad;  // the shards are leaves: their values change, not their graph
  for (std::size_t k = 0; k < storage_.size(); ++k) layout_.write_shards(parameters_, storage_[k]);
  for (std::size_t s = 0; s < shard_params_.size(); ++s) {
    const std::size_t i = slot_of_shard_[s];
    // zero3's units: a view into their shards; everything else: this rank's rows of the model's parameter itself,
    // detached (a plain tensor sharing its storage, whose in-place updates the model sees).
    if (!shard_params_[s].defined()) {
      at::Tensor rows = unit_of_slot_[i] >= 0 && stage_ == ZeroStage::zero3
                            ? layout_.shard_of_buffer(storage_[dtype_index(layout_.slots()[i].dtype)], i).detach()
                            : layout_.shard(parameters_[i].detach(), i).detach();
      shard_params_[s] = rows.requires_grad_(true);
    }
  }
  follow_parameters();
}

void ShardedStep::reset_backward() {
  armed_ = false;
  // A backward that stopped midway (an exception, zero_grad before the reduce) leaves reduces started: each rank
  // started the same ones, so they complete on the backend's threads; their results are not wanted.
  in_flight_.clear();
  unreduced_ = buckets_.size();
  reduced_.assign(buckets_.size(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = 0;
    for (int owner : bucket_of_slot_)
      if (owner == static_cast<int>(b)) ++pending_[b];
  }
}

void ShardedStep::follow_parameters() {
  c10::NoGradGuard no_grad;
  for (std::size_t s = 0; s < shard_params_.size(); ++s) {
    const std::size_t i = slot_of_shard_[s];
    if (stage_ == ZeroStage::zero3 && unit_of_slot_[i] >= 0) continue;
    at::Tensor rows = layout_.shard(parameters_[i].detach(), i);
    if (shard_params_[s].data_ptr() != rows.data_ptr()) shard_params_[s].set_data(rows.detach());
  }
}

void ShardedStep::reduce_during_backward(bool armed) {
  // A plugin may have given a parameter new storage since the last step (channels_last converts the model at
  // fit_start by set_data): the rows the optimizer steps follow it before this step's gradients arrive.
  follow_parameters();
  armed_ = armed && stage_ != ZeroStage::zero3;
}

void ShardedStep::gradient_ready(std::size_t slot) {
  if (!armed_) return;
  const int b = bucket_of_slot_[slot];
  if (b < 0 || reduced_[static_cast<std::size_t>(b)]) return;
  --pending_[static_cast<std::size_t>(b)];
  // In one order on every rank: the last bucket first, each after all those behind it.
  while (unreduced_ > 0 && pending_[unreduced_ - 1] <= 0) reduce_now(--unreduced_);
}

void ShardedStep::reduce_gradients() {
  armed_ = false;
  follow_parameters();
  // zero3 reduced each released unit's gradients in its backward, into the shard's gradient: the root's remain.
  // Before release_units() its units run whole, as zero2's parameters do, and are reduced here.
  const bool units_done = stage_ == ZeroStage::zero3 && released_;
  while (unreduced_ > 0) {
    const std::size_t b = --unreduced_;
    if (units_done && unit_of_bucket_[b] >= 0) continue;
    reduce_now(b);
  }
  finish_reduces();
  // A dtype whose buckets were all units that did not run this step: zeros.
  if (stage_ != ZeroStage::zero1)
    for (std::size_t k = 0; k < grad_buffers_.size(); ++k) grad_buffer(k);
  reset_backward();
}

void ShardedStep::reduce_now(std::size_t b) {
  c10::NoGradGuard no_grad;  // gradients are reduced as values
  reduced_[b] = 1;
  const Bucket& bucket = buckets_[b];
  if (bucket.numel() == 0) return;
  // The reduce before this one has run while the backward computed this bucket's gradients: finished first, so no
  // more than one bucket's buffers are in flight at a time (the peak memory stays one bucket above the formula).
  finish_reduces();
  InFlight flight;
  flight.bucket = b;
  flight.grads.resize(parameters_.size());
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (Layout::in_bucket(layout_.slots()[i], bucket)) flight.grads[i] = dense_grad(i);
  at::Tensor packed = pack_bucket(bucket, flight.grads, /*release=*/stage_ != ZeroStage::zero1);
  if (communicator_)
    flight.reduce = communicator_->start_reduce_scatter(packed, /*mean=*/true);
  else
    flight.local = packed;  // over one rank the mean is the packed buffer itself
  in_flight_.push_back(std::move(flight));
}

void ShardedStep::finish_reduces() {
  while (!in_flight_.empty()) finish_reduce();
}

void ShardedStep::finish_reduce() {
  c10::NoGradGuard no_grad;
  InFlight flight = std::move(in_flight_.front());
  in_flight_.pop_front();
  const Bucket& bucket = buckets_[flight.bucket];
  at::Tensor mine = communicator_ ? flight.reduce.finish() : flight.local;
  if (stage_ != ZeroStage::zero1) {
    grad_buffer(dtype_index(bucket.dtype)).narrow(0, bucket.begin, bucket.numel()).copy_(mine);
    return;
  }
  // zero1: the mean goes into this rank's rows of the model's gradient, which are the shard's gradient.
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (flight.grads[i].defined() && shard_of_slot_[i] >= 0) {
      at::Tensor rows = layout_.shard(flight.grads[i], i);
      rows.copy_(layout_.shard_of_part(mine, bucket, i));
      shard_params_[static_cast<std::size_t>(shard_of_slot_[i])].mutable_grad() = rows.detach();
    }
  }
}

at::Tensor ShardedStep::dense_grad(std::size_t i) {
  at::Tensor& grad = parameters_[i].mutable_grad();
  if (grad.defined() && grad.is_sparse())
    throw Error("sharded step: the gradient of '" + layout_.slots()[i].name +
                "' is sparse; a sharded step reduces dense gradients only");
  if (grad.defined()) return grad;
  // No gradient on this rank (an unused branch, or none yet) is a zero contribution to the mean; every rank still
  // sends its slot, so all agree on the collective's size. zero1 keeps it: its rows become the shard's gradient.
  at::Tensor zeros = at::zeros_like(parameters_[i]);
  if (stage_ == ZeroStage::zero1) grad = zeros;
  return zeros;
}

at::Tensor ShardedStep::pack_bucket(const Bucket& bucket, std::vector<at::Tensor>& grads, bool release) {
  at::Tensor packed = layout_.pack(grads, bucket);
  if (release) {
    // The packed copy holds them now; released before the collective, so the bucket's full gradients and the
    // received chunks are not alive at once.
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      if (!Layout::in_bucket(layout_.slots()[i], bucket)) continue;
      grads[i] = at::Tensor();
      parameters_[i].mutable_grad() = at::Tensor();
    }
  }
  return packed;
}

at::Tensor ShardedStep::reduce_bucket(const Bucket& bucket, std::vector<at::Tensor>& grads, bool release) {
  at::Tensor packed = pack_bucket(bucket, grads, release);
  // Over one rank the mean is the packed buffer itself ([1 x n]: already this rank's part).
  return communicator_ ? communicator_->reduce_scatter(packed, /*mean=*/true) : packed;
}

std::vector<HeldRows> ShardedStep::held_rows() const {
  std::vector<HeldRows> out;
  if (!released_) return out;
  const auto& slots = layout_.slots();
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (unit_of_slot_[i] >= 0) out.push_back({slots[i].name, slots[i].shape, shard_of(slots[i].name)});
  return out;
}

at::Tensor ShardedStep::own_part(std::size_t b) const {
  const Bucket& bucket = buckets_[b];
  if (unit_of_bucket_[b] >= 0)  // zero3's units: their shards are one piece of the flat storage
    return storage_[dtype_index(bucket.dtype)].narrow(0, bucket.begin, bucket.numel());
  return layout_.pack_own(parameters_, bucket);
}

void ShardedStep::gather_parameters() {
  c10::NoGradGuard no_grad;  // the targets are parameters: their values change, not their graph
  for (std::size_t s = 0; s < shard_params_.size(); ++s) {
    const std::size_t i = slot_of_shard_[s];
    if (unit_of_slot_[i] >= 0 && stage_ == ZeroStage::zero3) continue;
    // The optimizer stepped rows of the model's own storage: a parameter given new storage since (set_data, a
    // module moved to another device) would leave them stepping a tensor the model no longer uses.
    if (shard_params_[s].data_ptr() != layout_.shard(parameters_[i], i).data_ptr())
      throw Error("sharded step: the model's parameter '" + layout_.slots()[i].name +
                  "' was given new storage after the sharded step was built (set_data, or the module moved), so "
                  "the optimizer stepped rows the model no longer reads; call load_parameters() after replacing "
                  "parameters");
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    // A released unit is gathered when it runs next; one held whole (gather_units) is gathered with the root.
    if (bucket.numel() == 0) continue;
    if (unit_of_bucket_[b] >= 0 && !unit_state_[static_cast<std::size_t>(unit_of_bucket_[b])].whole) continue;
    at::Tensor values = own_part(b);
    at::Tensor gathered = communicator_ ? communicator_->all_gather(values) : values;
    layout_.unpack_into(gathered, parameters_, bucket);
  }
}

void ShardedStep::zero_grad() {
  for (const at::Tensor& shard : shard_params_) shard.mutable_grad() = at::Tensor();
  grads_live_.assign(grads_live_.size(), 0);  // the buffers stay, for the next step's gradients
  for (const at::Tensor& parameter : parameters_) parameter.mutable_grad() = at::Tensor();
  reset_backward();
}

}  // namespace baton::sharding
