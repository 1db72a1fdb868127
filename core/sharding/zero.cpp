#include "sharding/zero.h"

#include <algorithm>
#include <utility>

#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>

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
  buckets_ = layout_.buckets(bucket_bytes, unit_of_slot_);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    int unit = -1;
    for (std::size_t i = 0; i < unit_of_slot_.size(); ++i)
      if (Layout::in_bucket(layout_.slots()[i], buckets_[b]) && layout_.slots()[i].slot_numel() > 0)
        unit = unit_of_slot_[i];
    unit_of_bucket_.push_back(unit);
    if (unit >= 0) unit_state_[static_cast<std::size_t>(unit)].buckets.push_back(b);
  }
  // Each shard parameter is a fresh leaf holding this rank's rows of the model's current values, padding zeroed.
  // They are equal on every rank only if the model is (the trainer broadcasts it before building this).
  for (at::ScalarType dtype : layout_.dtypes()) {
    std::size_t first = 0;
    while (layout_.slots()[first].dtype != dtype) ++first;
    at::Tensor buffer = layout_.new_buffer(dtype, parameters_[first].device());
    layout_.write_shards(parameters_, buffer);
    shards_.push_back(buffer.requires_grad_(true));
  }
  std::size_t registered = 0;
  try {
    for (; registered < unit_specs_.size(); ++registered) detail::register_unit(*unit_specs_[registered].module, *this);
  } catch (...) {
    for (std::size_t u = 0; u < registered; ++u) detail::unregister_unit(*unit_specs_[u].module, *this);
    throw;
  }
}

ShardedStep::~ShardedStep() {
  for (const UnitSpec& unit : unit_specs_) detail::unregister_unit(*unit.module, *this);
}

std::size_t ShardedStep::dtype_index(at::ScalarType dtype) const {
  const auto& dtypes = layout_.dtypes();
  return static_cast<std::size_t>(std::find(dtypes.begin(), dtypes.end(), dtype) - dtypes.begin());
}

at::Tensor& ShardedStep::shard_grad(std::size_t k) {
  at::Tensor& grad = shards_[k].mutable_grad();
  if (!grad.defined()) grad = at::zeros_like(shards_[k]);
  return grad;
}

const at::Tensor& ShardedStep::shard_parameter(at::ScalarType dtype) const {
  const auto& dtypes = layout_.dtypes();
  auto found = std::find(dtypes.begin(), dtypes.end(), dtype);
  if (found == dtypes.end()) {
    std::string have;
    for (at::ScalarType d : dtypes) have += std::string(have.empty() ? "" : ", ") + c10::toString(d);
    throw Error(std::string("sharded step: no sharded parameter is ") + c10::toString(dtype) + " (the shards are " +
                (have.empty() ? std::string("none") : have) + ")");
  }
  return shards_[static_cast<std::size_t>(found - dtypes.begin())];
}

at::Tensor ShardedStep::shard_of(const std::string& name) const {
  const std::size_t index = layout_.index_of(name);
  // Detached: a view for reading and writing values (the EMA, a checkpoint), outside the optimizer's autograd.
  return layout_.shard_of_buffer(shard_parameter(layout_.slots()[index].dtype).detach(), index);
}

void ShardedStep::load_parameters() {
  if (released_)
    throw Error("sharded step: load_parameters: the units' parameters are released (zero3); gather_units() first");
  c10::NoGradGuard no_grad;  // the shards are leaves: their values change, not their graph
  for (std::size_t k = 0; k < shards_.size(); ++k) layout_.write_shards(parameters_, shards_[k]);
}

void ShardedStep::reduce_gradients() {
  c10::NoGradGuard no_grad;  // gradients are reduced as values
  // zero3 reduced each released unit's gradients in its backward, into the shard's gradient: the root's remain.
  // Before release_units() its units run whole, as zero2's parameters do, and are reduced here.
  const bool units_done = stage_ == ZeroStage::zero3 && released_;
  std::vector<at::Tensor> grads(parameters_.size());
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (!units_done || unit_of_slot_[i] < 0) grads[i] = dense_grad(i);
  std::vector<at::Tensor> reduced(shards_.size());  // each dtype's shard gradient, filled bucket by bucket
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    if (units_done && unit_of_bucket_[b] >= 0) continue;
    const std::size_t k = dtype_index(bucket.dtype);
    // The dtype's one bucket: its result is the gradient. zero3 keeps the units' parts of the gradient.
    const bool whole = !units_done && bucket.numel() == shards_[k].numel();
    if (!whole && !reduced[k].defined()) reduced[k] = units_done ? shard_grad(k) : at::empty_like(shards_[k]);
    if (bucket.numel() == 0) {
      if (whole) reduced[k] = at::zeros_like(shards_[k]);
      continue;
    }
    at::Tensor mine = reduce_bucket(bucket, grads, /*release=*/stage_ != ZeroStage::zero1);
    if (whole)
      reduced[k] = mine;
    else
      reduced[k].narrow(0, bucket.begin, bucket.numel()).copy_(mine);
  }
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    if (units_done)
      shard_grad(k);  // a dtype of units alone that none ran this step: zeros
    else
      shards_[k].mutable_grad() = reduced[k];
  }
}

at::Tensor ShardedStep::dense_grad(std::size_t i) const {
  const at::Tensor& grad = parameters_[i].grad();
  if (grad.defined() && grad.is_sparse())
    throw Error("sharded step: the gradient of '" + layout_.slots()[i].name +
                "' is sparse; a sharded step reduces dense gradients only");
  // No gradient on this rank (an unused branch, or none yet) is a zero contribution to the mean; every rank still
  // sends its slot, so all agree on the collective's size.
  return grad.defined() ? grad : at::zeros_like(parameters_[i]);
}

at::Tensor ShardedStep::reduce_bucket(const Bucket& bucket, std::vector<at::Tensor>& grads, bool release) {
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

void ShardedStep::gather_parameters() {
  c10::NoGradGuard no_grad;  // the targets are parameters: their values change, not their graph
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    // A released unit is gathered when it runs next; one held whole (gather_units) is gathered with the root.
    if (bucket.numel() == 0) continue;
    if (unit_of_bucket_[b] >= 0 && !unit_state_[static_cast<std::size_t>(unit_of_bucket_[b])].whole) continue;
    at::Tensor values = shard_parameter(bucket.dtype).detach().narrow(0, bucket.begin, bucket.numel());
    at::Tensor gathered = communicator_ ? communicator_->all_gather(values) : values;
    layout_.unpack_into(gathered, parameters_, bucket);
  }
}

void ShardedStep::zero_grad() {
  for (const at::Tensor& shard : shards_) shard.mutable_grad() = at::Tensor();
  for (const at::Tensor& parameter : parameters_) parameter.mutable_grad() = at::Tensor();
}

}  // namespace baton::sharding
