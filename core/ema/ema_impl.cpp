#include "ema/ema_impl.h"

#include <algorithm>
#include <optional>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <torch/nn/module.h>
#if __has_include(<ATen/ops/_foreach_lerp.h>)  // LibTorch 2.0 on; 1.13 updates device tensors one by one
#include <ATen/ops/_foreach_lerp.h>
#define BATON_FOREACH_LERP 1
#endif

#include "baton/model_tensors.h"

namespace baton {
namespace {

using ema_kernel::Element;

std::optional<Element> float_element(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return Element::f32;
    case at::kDouble: return Element::f64;
    case at::kBFloat16: return Element::bf16;
    case at::kHalf: return Element::f16;
    default: return std::nullopt;
  }
}

// The fused CPU kernel handles dense host tensors; everything else (other devices, strided weights) takes the
// LibTorch path.
std::optional<ema_kernel::Task> kernel_task(const at::Tensor& ema, const at::Tensor& weight, bool average) {
  if (!ema.is_cpu() || !weight.is_cpu() || !ema.is_contiguous() || !weight.is_contiguous()) return std::nullopt;
  if (!average && ema.scalar_type() == weight.scalar_type())
    return ema_kernel::Task{ema.data_ptr(), weight.data_ptr(), static_cast<std::int64_t>(ema.nbytes()),
                            Element::bytes, Element::bytes, true};
  const auto e = float_element(ema.scalar_type()), w = float_element(weight.scalar_type());
  if (!e || !w) return std::nullopt;
  return ema_kernel::Task{ema.data_ptr(), weight.data_ptr(), ema.numel(), *e, *w, !average};
}

// Device-side update with LibTorch ops: queued on the tensors' stream, no host synchronisation (a host EMA of a
// device weight necessarily waits for its copy).
void op_update(at::Tensor& ema, const at::Tensor& weight, bool average, double smoothing) {
  const bool non_blocking = !ema.is_cpu();
  if (!average || smoothing == 0.0) {
    ema.copy_(weight, non_blocking);
  } else if (ema.device() == weight.device() && ema.scalar_type() == weight.scalar_type()) {
    ema.lerp_(weight, 1.0 - smoothing);
  } else {
    ema.lerp_(weight.to(ema.device(), ema.scalar_type(), non_blocking), 1.0 - smoothing);
  }
}

// The device tensors left to LibTorch ops. Averaged pairs of one device and dtype go through one multi-tensor
// lerp (a few kernel launches for the whole model, where one launch per tensor left a GPU idle between small
// kernels: 0.39 of the copy bandwidth on an H100); the rest one tensor at a time. Per element both compute the same
// lerp, so the result does not depend on the grouping.
struct OpUpdate {
  at::Tensor average, weight;
  bool averaged;
};

[[maybe_unused]] bool exchangeable_pair(const OpUpdate& u) {
  return u.average.device() == u.weight.device() && u.average.scalar_type() == u.weight.scalar_type() &&
         u.average.layout() == at::kStrided && u.weight.layout() == at::kStrided;
}

void op_updates(std::vector<OpUpdate>& updates, double smoothing) {
#ifdef BATON_FOREACH_LERP
  if (smoothing != 0.0) {
    std::vector<bool> done(updates.size(), false);
    for (std::size_t i = 0; i < updates.size(); ++i) {
      const OpUpdate& first = updates[i];
      if (done[i] || !first.averaged || !exchangeable_pair(first)) continue;
      std::vector<at::Tensor> averages, weights;
      for (std::size_t j = i; j < updates.size(); ++j) {
        const OpUpdate& u = updates[j];
        if (done[j] || !u.averaged || !exchangeable_pair(u) || u.average.device() != first.average.device() ||
            u.average.scalar_type() != first.average.scalar_type())
          continue;
        averages.push_back(u.average);
        weights.push_back(u.weight);
        done[j] = true;
      }
      at::_foreach_lerp_(averages, weights, 1.0 - smoothing);
    }
    for (std::size_t i = 0; i < updates.size(); ++i)
      if (!done[i]) op_update(updates[i].average, updates[i].weight, updates[i].averaged, smoothing);
    return;
  }
#endif
  for (auto& u : updates) op_update(u.average, u.weight, u.averaged, smoothing);
}

}  // namespace

void check_ema_smoothing(double smoothing) {
  if (!(smoothing >= 0.0 && smoothing <= 1.0))
    throw Error("EMA: smoothing must lie in [0, 1], got " + format_number(smoothing));
}

c10::Device parse_ema_device(const std::string& device) {
  try {
    return c10::Device(device);
  } catch (const std::exception&) {
    throw Error("EMA: unknown device '" + device + "' (expected \"cpu\", \"cuda\", \"cuda:0\", ...)");
  }
}

const at::Tensor& ExponentialMovingAverage::Impl::Shard::buffer(at::ScalarType dtype) const {
  const auto& dtypes = layout->dtypes();
  return buffers[static_cast<std::size_t>(std::find(dtypes.begin(), dtypes.end(), dtype) - dtypes.begin())];
}

at::Tensor ExponentialMovingAverage::Impl::Shard::view(std::size_t slot) const {
  return layout->shard_of_buffer(buffer(layout->slots()[slot].dtype), slot);
}

std::unordered_map<std::string, HeldRows> ExponentialMovingAverage::Impl::held_now() const {
  std::unordered_map<std::string, HeldRows> out;
  if (!options.held_rows) return out;
  for (auto& held : options.held_rows()) {
    std::string name = held.name;
    out.emplace(std::move(name), std::move(held));
  }
  return out;
}

void ExponentialMovingAverage::Impl::make_shard(const std::vector<at::Tensor>& weights, const std::vector<bool>& rows) {
  shard = Shard();
  std::vector<sharding::TensorSpec> specs;
  c10::Device device(c10::kCPU);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    if (!e.in_shard) continue;
    if (specs.empty()) device = average_device(weights[i]);
    e.slot = specs.size();
    specs.push_back({e.name, e.shape, e.dtype});
    shard.entry_of.push_back(i);
  }
  shard.layout.emplace(std::move(specs), options.shard_over->rank(), options.shard_over->world_size());
  for (at::ScalarType dtype : shard.layout->dtypes())
    shard.buffers.push_back(shard.layout->new_buffer(dtype, device));  // zeroed: the padding stays 0
  for (std::size_t slot = 0; slot < shard.entry_of.size(); ++slot) {
    const std::size_t i = shard.entry_of[slot];
    if (rows[i])
      shard.view(slot).copy_(weights[i].reshape(shard.layout->slots()[slot].shard_shape()));
    else
      shard.layout->write_shard(weights[i], slot, shard.buffer(entries[i].dtype));
  }
}

std::vector<at::Tensor> ExponentialMovingAverage::Impl::gather() const {
  std::vector<at::Tensor> out(entries.size());
  if (!shard.layout) return out;
  // On the backend's device (NCCL: the rank's GPU), wherever the EMA lives (device = "cpu" offloads it).
  const c10::Device backend(options.shard_over->device());
  for (const at::Tensor& buffer : shard.buffers) {
    std::vector<at::Tensor> full;
    if (buffer.numel() == 0) {  // only empty tensors of this dtype: nothing to move
      full.resize(shard.entry_of.size());
      for (std::size_t slot = 0; slot < full.size(); ++slot)
        if (shard.layout->slots()[slot].dtype == buffer.scalar_type())
          full[slot] = at::empty(shard.layout->slots()[slot].shape, buffer.options());
    } else {
      const at::Tensor gathered = buffer.device() == backend
                                      ? options.shard_over->all_gather(buffer)
                                      : options.shard_over->all_gather(buffer.to(backend)).to(buffer.device());
      full = shard.layout->unpack(gathered);
    }
    for (std::size_t slot = 0; slot < full.size(); ++slot)
      if (full[slot].defined()) out[shard.entry_of[slot]] = std::move(full[slot]);
  }
  return out;
}

std::vector<at::Tensor> ExponentialMovingAverage::Impl::align(const torch::nn::Module& model,
                                                              std::vector<bool>& rows) const {
  const auto held = held_now();
  rows.assign(entries.size(), false);
  std::vector<at::Tensor> out(entries.size());
  std::size_t next = 0, found = 0;
  for (auto& [name, tensor, parameter] : model_tensors(model)) {
    std::size_t i = next;
    if (i >= entries.size() || entries[i].name != name) {
      auto it = index.find(name);
      if (it == index.end())
        throw Error("EMA: the model has a tensor '" + name +
                    "' that the EMA does not hold (was the EMA built from another model? call reset(model))");
      i = it->second;
    }
    const at::IntArrayRef expected = entries[i].shape;
    if (auto h = held.find(name); h != held.end()) {
      if (at::IntArrayRef(h->second.shape) != expected)
        throw Error("EMA: tensor '" + name + "' has shape " + format_shape(h->second.shape) + " in the run but " +
                    format_shape(expected) + " in the EMA");
      out[i] = h->second.rows;
      rows[i] = true;
      ++found;
      next = i + 1;
      continue;
    }
    if (tensor.sizes() != expected)
      throw Error("EMA: tensor '" + name + "' has shape " + format_shape(tensor.sizes()) + " in the model but " +
                  format_shape(expected) + " in the EMA");
    out[i] = std::move(tensor);
    ++found;
    next = i + 1;
  }
  if (found != entries.size())
    for (std::size_t i = 0; i < entries.size(); ++i)
      if (!out[i].defined())
        throw Error("EMA: tensor '" + entries[i].name + "' is kept by the EMA but missing from the model");
  return out;
}

void ExponentialMovingAverage::Impl::update(const torch::nn::Module& model, double smoothing) {
  check_ema_smoothing(smoothing);
  require_initialized("update");
  require_not_swapped("update");
  std::vector<bool> rows;
  const auto weights = align(model, rows);
  at::NoGradGuard no_grad;
  // A sharded EMA updates the segments of its slice exactly as a whole one updates whole tensors (the same
  // kernel, element by element), so both give bitwise the same average; no rank talks to another.
  std::vector<ema_kernel::Task> tasks;
  std::vector<OpUpdate> others;  // updated with LibTorch ops
  tasks.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    // A sharded entry pairs its rows in the shard's buffer with the same rows of the weight (a view: dim-0 rows of
    // a contiguous tensor are contiguous, so the fused kernel takes them in place).
    // A weight held as rows is already this rank's rows (of a whole EMA in a world of one: the whole tensor).
    at::Tensor average = kept(i);
    at::Tensor weight = e.in_shard && !rows[i] ? shard.layout->shard(weights[i], e.slot) : weights[i];
    if (rows[i] && weight.sizes() != average.sizes())
      throw Error("EMA: tensor '" + e.name + "' is held as this rank's rows " + format_shape(weight.sizes()) +
                  " but the EMA keeps " + format_shape(average.sizes()) +
                  " of it: over several ranks the EMA must be sharded as the run is (EmaOptions::shard_over)");
    if (auto task = kernel_task(average, weight, e.averaged))
      tasks.push_back(*task);
    else
      others.push_back({average, weight, e.averaged});
  }
  if (tasks != plan.tasks()) plan = ema_kernel::Plan(std::move(tasks));
  plan.run(smoothing, options.threads);
  op_updates(others, smoothing);
}

void ExponentialMovingAverage::Impl::swap_in(const std::vector<at::Tensor>& weights, const std::vector<bool>& rows) {
  // Backups first: if one cannot be allocated, nothing has changed yet.
  std::vector<at::Tensor> backups(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i)
    if (rows[i])
      backups[i] = weights[i].detach().clone();
    else if (!exchangeable(entries[i].ema, weights[i]))
      backups[i] = weights[i].detach().to(entries[i].ema.device(), weights[i].scalar_type(),
                                          /*non_blocking=*/false, /*copy=*/true);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    const at::Tensor& weight = weights[i];
    if (rows[i]) {
      e.stash = std::move(backups[i]);
      weight.detach().copy_(kept(i).reshape(weight.sizes()), /*non_blocking=*/false);
    } else if (backups[i].defined()) {
      e.stash = std::move(backups[i]);
      weight.detach().copy_(e.ema, /*non_blocking=*/!e.ema.is_cpu());
    } else {
      // The parameter keeps its TensorImpl (its grad, and optimizer state keyed by it); only its data changes.
      e.stash = weight.variable_data();
      weight.set_data(e.ema);
      e.holder = weight;
      e.ema = at::Tensor();
    }
  }
}

void ExponentialMovingAverage::Impl::swap_out(const std::vector<at::Tensor>& weights, const std::vector<bool>& rows) {
  for (std::size_t i = 0; i < entries.size(); ++i)
    if (entries[i].holder.defined() && weights[i].unsafeGetTensorImpl() != entries[i].holder.unsafeGetTensorImpl())
      throw Error("EMA: swap back needs the model the EMA was swapped into, but tensor '" + entries[i].name +
                  "' is a different tensor");
  // In reverse order: a tensor kept under two names (tied weights) is unwound last-in, first-out.
  for (std::size_t i = entries.size(); i-- > 0;) {
    Entry& e = entries[i];
    const at::Tensor& weight = weights[i];
    if (rows[i]) {
      weight.detach().copy_(e.stash, /*non_blocking=*/false);
    } else if (e.holder.defined()) {
      e.ema = weight.variable_data();
      weight.set_data(e.stash);
      e.holder = at::Tensor();
    } else {
      weight.detach().copy_(e.stash, /*non_blocking=*/false);
    }
    e.stash = at::Tensor();
  }
}

void ExponentialMovingAverage::Impl::gather_for_swap(const std::vector<bool>& rows) {
  std::vector<at::Tensor> gathered = gather();
  for (std::size_t i = 0; i < entries.size(); ++i)
    if (entries[i].in_shard && !rows[i]) entries[i].ema = std::move(gathered[i]);
}

void ExponentialMovingAverage::Impl::release_gathered() {
  for (auto& e : entries)
    if (e.in_shard) e.ema = at::Tensor();
}

}  // namespace baton
