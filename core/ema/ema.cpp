#include "baton/ema.h"

#include <cmath>
#include <iostream>
#include <limits>
#include <unordered_map>

#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>

#include "baton/error.h"
#include "baton/model_tensors.h"
#include "baton/text.h"
#include "ema/ema_impl.h"

namespace baton {

ExponentialMovingAverage::ExponentialMovingAverage(EmaOptions options) : impl_(std::make_unique<Impl>()) {
  check_ema_smoothing(options.smoothing);
  if (!options.device.empty()) parse_ema_device(options.device);
  if (options.threads < 0) throw Error("EMA: threads must be >= 0 (0 = one per core), got " + std::to_string(options.threads));
  impl_->options = std::move(options);
}

ExponentialMovingAverage::ExponentialMovingAverage(const torch::nn::Module& model, EmaOptions options)
    : ExponentialMovingAverage(std::move(options)) {
  reset(model);
}

ExponentialMovingAverage::~ExponentialMovingAverage() = default;
ExponentialMovingAverage::ExponentialMovingAverage(ExponentialMovingAverage&&) noexcept = default;
ExponentialMovingAverage& ExponentialMovingAverage::operator=(ExponentialMovingAverage&&) noexcept = default;

void ExponentialMovingAverage::reset(const torch::nn::Module& model) {
  impl_->require_not_swapped("reset");
  at::NoGradGuard no_grad;
  std::vector<Impl::Entry> entries;
  std::unordered_map<std::string, std::size_t> index;
  std::vector<at::Tensor> weights;
  std::vector<bool> rows;
  const auto held = impl_->held_now();
  for (auto& [name, model_tensor, parameter] : model_tensors(model)) {
    // A weight held as this rank's rows (EmaOptions::held_rows) starts from those rows, at its global shape.
    auto h = held.find(name);
    const bool as_rows = h != held.end();
    const at::Tensor& tensor = as_rows ? h->second.rows : model_tensor;
    Impl::Entry entry;
    entry.name = name;
    entry.averaged = impl_->averages(name, tensor, parameter);
    entry.shape = as_rows ? h->second.shape : tensor.sizes().vec();
    entry.dtype = impl_->average_dtype(tensor, entry.averaged);
    // Integer buffers (counters) are tiny and kept whole on every rank; the floating tensors are sharded.
    entry.in_shard = impl_->sharded() && tensor.is_floating_point();
    if (!entry.in_shard) {
      if (as_rows && tensor.sizes() != at::IntArrayRef(entry.shape))
        throw Error("EMA: tensor '" + name + "' is held as this rank's rows " + format_shape(tensor.sizes()) +
                    " of " + format_shape(entry.shape) + ": over several ranks the EMA must be sharded as the run is "
                    "(EmaOptions::shard_over)");
      entry.ema = impl_->make_average(tensor, entry.averaged);
    }
    index.emplace(name, entries.size());
    entries.push_back(std::move(entry));
    weights.push_back(tensor);
    rows.push_back(as_rows);
  }
  impl_->entries = std::move(entries);
  impl_->index = std::move(index);
  impl_->plan = ema_kernel::Plan();
  if (impl_->sharded()) impl_->make_shard(weights, rows);
  impl_->initialized = true;
}

bool ExponentialMovingAverage::initialized() const { return impl_->initialized; }

void ExponentialMovingAverage::update(const torch::nn::Module& model) { impl_->update(model, impl_->options.smoothing); }

void ExponentialMovingAverage::update(const torch::nn::Module& model, double smoothing) {
  impl_->update(model, smoothing);
}

void ExponentialMovingAverage::swap(torch::nn::Module& model) {
  impl_->require_initialized("swap");
  std::vector<bool> rows;
  const auto weights = impl_->align(model, rows);
  at::NoGradGuard no_grad;
  if (impl_->swapped) {
    impl_->swap_out(weights, rows);
    impl_->release_gathered();
  } else {
    if (impl_->sharded()) impl_->gather_for_swap(rows);
    try {
      impl_->swap_in(weights, rows);
    } catch (...) {
      impl_->release_gathered();
      throw;
    }
  }
  impl_->swapped = !impl_->swapped;
}

bool ExponentialMovingAverage::swapped() const { return impl_->swapped; }

void ExponentialMovingAverage::copy_to(torch::nn::Module& model) const {
  impl_->require_initialized("copy_to");
  impl_->require_not_swapped("copy_to");
  std::vector<bool> rows;
  const auto weights = impl_->align(model, rows);
  const std::vector<at::Tensor> gathered = impl_->gather();
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    // Rows take this rank's rows of the average (its own; in a world of one, all of it).
    const at::Tensor average = rows[i] ? impl_->kept(i).reshape(weights[i].sizes()) : impl_->average_of(i, gathered);
    weights[i].detach().copy_(average, /*non_blocking=*/!average.is_cpu());
  }
}

void ExponentialMovingAverage::to(const std::string& device) {
  impl_->require_not_swapped("move the EMA");
  const c10::Device target = parse_ema_device(device);
  for (auto& entry : impl_->entries)
    if (entry.ema.defined()) entry.ema = entry.ema.to(target);
  for (auto& buffer : impl_->shard.buffers) buffer = buffer.to(target);
  impl_->options.device = device;
  impl_->plan = ema_kernel::Plan();
}

std::string ExponentialMovingAverage::device() const {
  if (!impl_->shard.buffers.empty()) return impl_->shard.buffers.front().device().str();
  if (impl_->entries.empty()) return impl_->options.device;
  return Impl::current(impl_->entries.front()).device().str();
}

bool ExponentialMovingAverage::contains(const std::string& name) const { return impl_->index.count(name) != 0; }

std::size_t ExponentialMovingAverage::size() const { return impl_->entries.size(); }

std::vector<std::string> ExponentialMovingAverage::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->entries.size());
  for (const auto& entry : impl_->entries) out.push_back(entry.name);
  return out;
}

std::int64_t ExponentialMovingAverage::bytes() const {
  std::int64_t total = 0;
  for (const auto& entry : impl_->entries)
    if (!entry.in_shard) total += static_cast<std::int64_t>(Impl::current(entry).nbytes());
  for (const auto& buffer : impl_->shard.buffers) total += static_cast<std::int64_t>(buffer.nbytes());
  return total;
}

std::int64_t ExponentialMovingAverage::full_bytes() const {
  std::int64_t total = 0;
  for (const auto& entry : impl_->entries)
    total += entry.numel() * static_cast<std::int64_t>(c10::elementSize(entry.dtype));
  return total;
}

bool ExponentialMovingAverage::sharded() const { return impl_->sharded(); }

at::Tensor ExponentialMovingAverage::get(const std::string& name) const {
  const auto& entry = impl_->entry(name);
  if (!Impl::whole(entry))
    throw Error("EMA: tensor '" + name + "' is sharded across the ranks, so no rank holds all of it: state_dict() "
                "gathers the whole EMA");
  return Impl::current(entry);
}

std::vector<std::pair<std::string, at::Tensor>> ExponentialMovingAverage::state_dict() const {
  // Sharded and not swapped in: every rank gathers (a collective), whatever it then does with the result.
  // Swapped by rows, a sharded entry is not whole either: its average is gathered from the shard as ever.
  bool need = false;
  for (const auto& entry : impl_->entries) need = need || (entry.in_shard && !Impl::whole(entry));
  const std::vector<at::Tensor> gathered = need ? impl_->gather() : std::vector<at::Tensor>(impl_->entries.size());
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.reserve(impl_->entries.size());
  for (std::size_t i = 0; i < impl_->entries.size(); ++i)
    out.emplace_back(impl_->entries[i].name, impl_->average_of(i, gathered).clone(at::MemoryFormat::Contiguous));
  return out;
}

void ExponentialMovingAverage::load_state_dict(const std::vector<std::pair<std::string, at::Tensor>>& state,
                                               bool strict) {
  impl_->require_initialized("load_state_dict");
  impl_->require_not_swapped("load a state");
  // Everything is checked before anything is written, so a bad state leaves the EMA as it was.
  std::vector<const at::Tensor*> sources(impl_->entries.size(), nullptr);
  for (const auto& [name, tensor] : state) {
    auto it = impl_->index.find(name);
    if (it == impl_->index.end()) {
      if (strict) throw Error("EMA state: unexpected tensor '" + name + "' (the model has no tensor of that name)");
      continue;
    }
    const Impl::Entry& expected = impl_->entries[it->second];
    if (sources[it->second]) throw Error("EMA state: tensor '" + name + "' appears twice");
    if (!tensor.defined()) throw Error("EMA state: tensor '" + name + "' is undefined");
    if (tensor.sizes() != at::IntArrayRef(expected.shape))
      throw Error("EMA state: tensor '" + name + "' has shape " + format_shape(tensor.sizes()) +
                  " but the EMA expects " + format_shape(expected.shape));
    if (tensor.scalar_type() != expected.dtype)
      throw Error("EMA state: tensor '" + name + "' has dtype " + std::string(c10::toString(tensor.scalar_type())) +
                  " but the EMA expects " + std::string(c10::toString(expected.dtype)));
    sources[it->second] = &tensor;
  }
  if (strict)
    for (std::size_t i = 0; i < sources.size(); ++i)
      if (!sources[i]) throw Error("EMA state: tensor '" + impl_->entries[i].name + "' is missing");
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (!sources[i]) continue;
    const Impl::Entry& entry = impl_->entries[i];
    // A sharded EMA takes its rows of the whole one, whatever world size saved it.
    if (entry.in_shard)
      impl_->shard.layout->write_shard(*sources[i], entry.slot, impl_->shard.buffer(entry.dtype));
    else
      impl_->entries[i].ema.copy_(*sources[i]);
  }
}

void ExponentialMovingAverage::save_rows(StateDict& out, const std::string& prefix) const {
  impl_->require_initialized("save_rows");
  impl_->require_not_swapped("save rows");
  const bool first_rank = !impl_->sharded() || impl_->options.shard_over->rank() == 0;
  for (std::size_t i = 0; i < impl_->entries.size(); ++i) {
    const Impl::Entry& entry = impl_->entries[i];
    if (!entry.in_shard) {
      if (first_rank) out.set_rows(prefix + entry.name, entry.ema, 0);
      continue;
    }
    const sharding::Slot& slot = impl_->shard.layout->slots()[entry.slot];
    if (slot.held.count() == 0) continue;
    const at::Tensor rows = impl_->kept(i);
    out.set_rows(prefix + entry.name, entry.shape.empty() ? rows.reshape({}) : rows, slot.held.begin);
  }
}

bool ExponentialMovingAverage::saved_as_rows(const StateDict& in, const std::string& prefix) const {
  for (const auto& entry : impl_->entries)
    if (in.has_rows(prefix + entry.name)) return true;
  return false;
}

void ExponentialMovingAverage::load_rows(const StateDict& in, const std::string& prefix) {
  impl_->require_initialized("load_rows");
  impl_->require_not_swapped("load a state");
  // Everything is read and checked before anything is written, so a bad state leaves the EMA as it was.
  std::vector<at::Tensor> read(impl_->entries.size());
  for (std::size_t i = 0; i < impl_->entries.size(); ++i) {
    const Impl::Entry& entry = impl_->entries[i];
    const std::string key = prefix + entry.name;
    if (!in.has_rows(key)) throw Error("EMA state: tensor '" + entry.name + "' is missing");
    const std::vector<std::int64_t> shape = in.rows_shape(key);
    if (shape != entry.shape)
      throw Error("EMA state: tensor '" + entry.name + "' has shape " + format_shape(shape) + " but the EMA expects " +
                  format_shape(entry.shape));
    sharding::RowRange rows{0, entry.shape.empty() ? 1 : entry.shape[0]};
    if (entry.in_shard) rows = impl_->shard.layout->slots()[entry.slot].held;
    if (rows.count() == 0) continue;
    read[i] = in.read_rows(key, rows.begin, rows.count());
    if (read[i].scalar_type() != entry.dtype)
      throw Error("EMA state: tensor '" + entry.name + "' has dtype " + std::string(c10::toString(read[i].scalar_type())) +
                  " but the EMA expects " + std::string(c10::toString(entry.dtype)));
  }
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < impl_->entries.size(); ++i) {
    if (!read[i].defined()) continue;
    at::Tensor target = impl_->kept(i);
    target.copy_(read[i].reshape(target.sizes()));
  }
}

const EmaOptions& ExponentialMovingAverage::options() const { return impl_->options; }

void ExponentialMovingAverage::set_smoothing(double smoothing) {
  check_ema_smoothing(smoothing);
  impl_->options.smoothing = smoothing;
}

EmaSwapGuard::EmaSwapGuard(ExponentialMovingAverage& ema, torch::nn::Module& model, EmaGuardMode mode)
    : ema_(ema), model_(model) {
  if (!ema_.swapped()) {
    ema_.swap(model_);
    swapped_ = true;
  }
  // Evaluation by default: a train-mode forward would write batch statistics into the EMA's buffers.
  if (mode == EmaGuardMode::eval && model_.is_training()) {
    model_.eval();
    restore_training_ = true;
  }
}

EmaSwapGuard::~EmaSwapGuard() {
  if (restore_training_) model_.train();
  if (!swapped_ || !ema_.swapped()) return;
  try {
    ema_.swap(model_);
  } catch (const std::exception& e) {
    // A destructor cannot throw (it may run during unwinding); this only happens when the model's layout was
    // changed inside the guard's scope.
    std::cerr << "baton: EmaSwapGuard could not restore the raw weights: " << e.what() << "\n";
  }
}

double smoothing_from_half_life(double half_life, double interval) {
  if (!(half_life >= 0.0) || !std::isfinite(half_life))
    throw Error("EMA: half life must be a finite number >= 0, got " + std::to_string(half_life));
  if (!(interval > 0.0) || !std::isfinite(interval))
    throw Error("EMA: update interval must be a finite number > 0, got " + std::to_string(interval));
  if (half_life == 0.0) return 0.0;
  return std::exp2(-interval / half_life);
}

double half_life_from_smoothing(double smoothing, double interval) {
  check_ema_smoothing(smoothing);
  if (!(interval > 0.0) || !std::isfinite(interval))
    throw Error("EMA: update interval must be a finite number > 0, got " + std::to_string(interval));
  if (smoothing == 0.0) return 0.0;
  if (smoothing == 1.0) return std::numeric_limits<double>::infinity();  // never moves (and -log(1) is -0)
  return interval * std::log(2.0) / -std::log(smoothing);
}

}  // namespace baton
