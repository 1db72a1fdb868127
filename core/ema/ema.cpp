#include "baton/ema.h"

#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <unordered_map>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include "baton/communicator.h"
#include "baton/error.h"
#include "baton/model_tensors.h"
#include "baton/text.h"
#include "baton/time.h"
#include "ema/ema_kernel.h"

namespace baton {
namespace {

using ema_kernel::Element;

// '*' matches any run of characters (dots included), '?' exactly one. Backtracks only to the last '*'.
bool glob_match(const std::string& pattern, const std::string& name) {
  std::size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

void check_smoothing(double smoothing) {
  if (!(smoothing >= 0.0 && smoothing <= 1.0))
    throw Error("EMA: smoothing must lie in [0, 1], got " + format_number(smoothing));
}

c10::Device parse_device(const std::string& device) {
  try {
    return c10::Device(device);
  } catch (const std::exception&) {
    throw Error("EMA: unknown device '" + device + "' (expected \"cpu\", \"cuda\", \"cuda:0\", ...)");
  }
}

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

}  // namespace

struct ExponentialMovingAverage::Impl {
  struct Entry {
    std::string name;
    bool averaged = false;
    std::vector<std::int64_t> shape;
    at::ScalarType dtype = at::kFloat;  // of the average
    // Sharded: the tensor is a range of the flattened EMA, of which this rank holds a slice; `ema` is then only
    // defined while the whole EMA is gathered for a swap.
    bool in_shard = false;
    std::int64_t offset = 0;  // in the flattened EMA
    at::Tensor ema;     // the average; undefined while its storage is exchanged into the model
    at::Tensor stash;   // while swapped: the raw weights (their storage, or a backup copy)
    at::Tensor holder;  // while swapped by exchange: the model tensor that now holds the EMA's storage
    std::int64_t numel() const {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      return n;
    }
  };

  // This rank's contiguous slice [begin, end) of the flattened floating-point tensors of a sharded EMA. Every rank's
  // slice is `chunk` long (the last one padded) so that one allgather joins them.
  struct Shard {
    struct Segment {  // where one tensor overlaps the slice
      std::size_t entry;
      std::int64_t in_tensor;
      std::int64_t in_shard;
      std::int64_t length;
    };
    at::Tensor data;
    std::int64_t total = 0, chunk = 0, begin = 0, end = 0;
    std::vector<Segment> segments;

    at::Tensor view(const Segment& s) const { return data.slice(0, s.in_shard, s.in_shard + s.length); }
    static at::Tensor piece(const at::Tensor& tensor, const Segment& s) {
      return tensor.detach().reshape({-1}).slice(0, s.in_tensor, s.in_tensor + s.length);
    }
  };

  EmaOptions options;
  std::vector<Entry> entries;
  std::unordered_map<std::string, std::size_t> index;
  bool initialized = false;
  bool swapped = false;
  ema_kernel::Plan plan;
  Shard shard;

  bool sharded() const { return options.shard_over != nullptr; }

  static at::Tensor current(const Entry& entry) {
    return entry.holder.defined() ? entry.holder.variable_data() : entry.ema;
  }

  // Whether an entry's average is at hand on this rank (not only a slice of it).
  static bool whole(const Entry& entry) { return entry.ema.defined() || entry.holder.defined(); }

  const Entry& entry(const std::string& name) const {
    auto it = index.find(name);
    if (it == index.end()) throw Error("EMA: no tensor named '" + name + "' (the EMA holds " +
                                       std::to_string(entries.size()) + " tensors of the model)");
    return entries[it->second];
  }

  void require_initialized(const char* action) const {
    if (!initialized)
      throw Error(std::string("EMA: ") + action +
                  " needs an initialised EMA: construct it from the model or call reset(model) first");
  }

  void require_not_swapped(const char* action) const {
    if (swapped)
      throw Error(std::string("EMA: cannot ") + action +
                  " while the model holds the EMA weights: call swap(model) again to put the raw weights back first");
  }

  bool averages(const std::string& name, const at::Tensor& tensor, bool parameter) const {
    if (!tensor.is_floating_point()) return false;
    if (!parameter && options.buffers == EmaBuffers::copy) return false;
    for (const auto& pattern : options.exclude)
      if (glob_match(pattern, name)) return false;
    return true;
  }

  at::ScalarType average_dtype(const at::Tensor& weight, bool averaged) const {
    at::ScalarType dtype = weight.scalar_type();
    if (averaged && options.float32 && (dtype == at::kBFloat16 || dtype == at::kHalf)) dtype = at::kFloat;
    return dtype;
  }

  c10::Device average_device(const at::Tensor& weight) const {
    return options.device.empty() ? weight.device() : parse_device(options.device);
  }

  at::Tensor make_average(const at::Tensor& weight, bool averaged) const {
    return weight.detach().to(average_device(weight), average_dtype(weight, averaged), /*non_blocking=*/false,
                              /*copy=*/true, at::MemoryFormat::Contiguous);
  }

  // Lays the floating-point entries end to end and takes this rank's slice of them, filled from `weights`.
  void make_shard(const std::vector<at::Tensor>& weights) {
    const int rank = options.shard_over->rank(), world = options.shard_over->world_size();
    shard = Shard();
    std::optional<at::ScalarType> dtype;
    c10::Device device(c10::kCPU);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      Entry& e = entries[i];
      if (!e.in_shard) continue;
      e.offset = shard.total;
      shard.total += e.numel();
      // One buffer needs one dtype: mixed dtypes share the wider one (each tensor converts back when gathered).
      dtype = dtype ? at::promote_types(*dtype, e.dtype) : e.dtype;
      if (shard.total == e.numel()) device = average_device(weights[i]);
    }
    shard.chunk = (shard.total + world - 1) / world;
    shard.begin = std::min(shard.total, shard.chunk * rank);
    shard.end = std::min(shard.total, shard.begin + shard.chunk);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      if (!e.in_shard) continue;
      const std::int64_t lo = std::max(shard.begin, e.offset), hi = std::min(shard.end, e.offset + e.numel());
      if (lo < hi) shard.segments.push_back(Shard::Segment{i, lo - e.offset, lo - shard.begin, hi - lo});
    }
    shard.data = at::empty({shard.chunk}, at::TensorOptions().dtype(dtype.value_or(at::kFloat)).device(device));
    if (shard.end - shard.begin < shard.chunk) shard.data.slice(0, shard.end - shard.begin).zero_();
    for (const auto& s : shard.segments) shard.view(s).copy_(Shard::piece(weights[s.entry], s));
  }

  // The whole flattened EMA (a collective: every rank's slice, in rank order).
  at::Tensor gather() const {
    if (shard.total == 0) return shard.data;
    // On the backend's device (NCCL: the rank's GPU), wherever the EMA lives (device = "cpu" offloads it).
    const c10::Device backend(options.shard_over->device());
    if (shard.data.device() == backend) return options.shard_over->all_gather(shard.data);
    return options.shard_over->all_gather(shard.data.to(backend)).to(shard.data.device());
  }

  static at::Tensor unflatten(const at::Tensor& flat, const Entry& e) {
    return flat.slice(0, e.offset, e.offset + e.numel()).view(e.shape).to(e.dtype);
  }

  // Every entry's average as a tensor: a view of `flat` (the gathered EMA) for sharded entries not swapped in.
  at::Tensor average_of(const Entry& e, const at::Tensor& flat) const {
    return whole(e) ? current(e) : unflatten(flat, e);
  }

  // The model's tensors in the EMA's order, checked name by name and shape by shape.
  std::vector<at::Tensor> align(const torch::nn::Module& model) const {
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

  void update(const torch::nn::Module& model, double smoothing) {
    check_smoothing(smoothing);
    require_initialized("update");
    require_not_swapped("update");
    const auto weights = align(model);
    at::NoGradGuard no_grad;
    // A sharded EMA updates the segments of its slice exactly as a whole one updates whole tensors (the same
    // kernel, element by element), so both give bitwise the same average; no rank talks to another.
    std::vector<ema_kernel::Task> tasks;
    struct Other {  // updated with LibTorch ops
      at::Tensor average, weight;
      bool averaged;
    };
    std::vector<Other> others;
    tasks.reserve(entries.size() + shard.segments.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      if (e.in_shard) continue;
      if (auto task = kernel_task(e.ema, weights[i], e.averaged))
        tasks.push_back(*task);
      else
        others.push_back({e.ema, weights[i], e.averaged});
    }
    for (const auto& s : shard.segments) {
      const Entry& e = entries[s.entry];
      at::Tensor average = shard.view(s);
      // A strided weight's piece is a temporary copy: the plan must not keep its address.
      at::Tensor weight = Shard::piece(weights[s.entry], s);
      std::optional<ema_kernel::Task> task;
      if (weights[s.entry].is_contiguous()) task = kernel_task(average, weight, e.averaged);
      if (task)
        tasks.push_back(*task);
      else
        others.push_back({average, weight, e.averaged});
    }
    if (tasks != plan.tasks()) plan = ema_kernel::Plan(std::move(tasks));
    plan.run(smoothing, options.threads);
    for (auto& other : others) op_update(other.average, other.weight, other.averaged, smoothing);
  }

  static bool exchangeable(const at::Tensor& ema, const at::Tensor& weight) {
    return ema.scalar_type() == weight.scalar_type() && ema.device() == weight.device() &&
           ema.layout() == weight.layout();
  }

  void swap_in(const std::vector<at::Tensor>& weights) {
    // Backups first: if one cannot be allocated, nothing has changed yet.
    std::vector<at::Tensor> backups(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i)
      if (!exchangeable(entries[i].ema, weights[i]))
        backups[i] = weights[i].detach().to(entries[i].ema.device(), weights[i].scalar_type(),
                                            /*non_blocking=*/false, /*copy=*/true);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      Entry& e = entries[i];
      const at::Tensor& weight = weights[i];
      if (backups[i].defined()) {
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

  void swap_out(const std::vector<at::Tensor>& weights) {
    for (std::size_t i = 0; i < entries.size(); ++i)
      if (entries[i].holder.defined() && weights[i].unsafeGetTensorImpl() != entries[i].holder.unsafeGetTensorImpl())
        throw Error("EMA: swap back needs the model the EMA was swapped into, but tensor '" + entries[i].name +
                    "' is a different tensor");
    // In reverse order: a tensor kept under two names (tied weights) is unwound last-in, first-out.
    for (std::size_t i = entries.size(); i-- > 0;) {
      Entry& e = entries[i];
      const at::Tensor& weight = weights[i];
      if (e.holder.defined()) {
        e.ema = weight.variable_data();
        weight.set_data(e.stash);
        e.holder = at::Tensor();
      } else {
        weight.detach().copy_(e.stash, /*non_blocking=*/false);
      }
      e.stash = at::Tensor();
    }
  }

  // Sharded: the whole EMA for a swap, as views of one gathered buffer, and its release after.
  void gather_for_swap() {
    const at::Tensor flat = gather();
    for (auto& e : entries)
      if (e.in_shard) e.ema = unflatten(flat, e);
  }

  void release_gathered() {
    for (auto& e : entries)
      if (e.in_shard) e.ema = at::Tensor();
  }
};

ExponentialMovingAverage::ExponentialMovingAverage(EmaOptions options) : impl_(std::make_unique<Impl>()) {
  check_smoothing(options.smoothing);
  if (!options.device.empty()) parse_device(options.device);
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
  for (auto& [name, tensor, parameter] : model_tensors(model)) {
    Impl::Entry entry;
    entry.name = name;
    entry.averaged = impl_->averages(name, tensor, parameter);
    entry.shape = tensor.sizes().vec();
    entry.dtype = impl_->average_dtype(tensor, entry.averaged);
    // Integer buffers (counters) are tiny and kept whole on every rank; the floating tensors are sharded.
    entry.in_shard = impl_->sharded() && tensor.is_floating_point();
    if (!entry.in_shard) entry.ema = impl_->make_average(tensor, entry.averaged);
    index.emplace(name, entries.size());
    entries.push_back(std::move(entry));
    weights.push_back(tensor);
  }
  impl_->entries = std::move(entries);
  impl_->index = std::move(index);
  impl_->plan = ema_kernel::Plan();
  if (impl_->sharded()) impl_->make_shard(weights);
  impl_->initialized = true;
}

bool ExponentialMovingAverage::initialized() const { return impl_->initialized; }

void ExponentialMovingAverage::update(const torch::nn::Module& model) { impl_->update(model, impl_->options.smoothing); }

void ExponentialMovingAverage::update(const torch::nn::Module& model, double smoothing) {
  impl_->update(model, smoothing);
}

void ExponentialMovingAverage::swap(torch::nn::Module& model) {
  impl_->require_initialized("swap");
  const auto weights = impl_->align(model);
  at::NoGradGuard no_grad;
  if (impl_->swapped) {
    impl_->swap_out(weights);
    impl_->release_gathered();
  } else {
    if (impl_->sharded()) impl_->gather_for_swap();
    try {
      impl_->swap_in(weights);
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
  const auto weights = impl_->align(model);
  const at::Tensor flat = impl_->sharded() ? impl_->gather() : at::Tensor();
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const at::Tensor average = impl_->average_of(impl_->entries[i], flat);
    weights[i].detach().copy_(average, /*non_blocking=*/!average.is_cpu());
  }
}

void ExponentialMovingAverage::to(const std::string& device) {
  impl_->require_not_swapped("move the EMA");
  const c10::Device target = parse_device(device);
  for (auto& entry : impl_->entries)
    if (entry.ema.defined()) entry.ema = entry.ema.to(target);
  if (impl_->shard.data.defined()) impl_->shard.data = impl_->shard.data.to(target);
  impl_->options.device = device;
  impl_->plan = ema_kernel::Plan();
}

std::string ExponentialMovingAverage::device() const {
  if (impl_->shard.data.defined() && impl_->shard.total > 0) return impl_->shard.data.device().str();
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
  if (impl_->shard.data.defined()) total += static_cast<std::int64_t>(impl_->shard.data.nbytes());
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
  const at::Tensor flat = impl_->sharded() && !impl_->swapped ? impl_->gather() : at::Tensor();
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.reserve(impl_->entries.size());
  for (const auto& entry : impl_->entries)
    out.emplace_back(entry.name, impl_->average_of(entry, flat).clone(at::MemoryFormat::Contiguous));
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
  for (std::size_t i = 0; i < sources.size(); ++i)
    if (sources[i] && !impl_->entries[i].in_shard) impl_->entries[i].ema.copy_(*sources[i]);
  // A sharded EMA takes its slice of the whole one, whatever world size saved it.
  for (const auto& s : impl_->shard.segments)
    if (sources[s.entry]) impl_->shard.view(s).copy_(Impl::Shard::piece(*sources[s.entry], s));
}

const EmaOptions& ExponentialMovingAverage::options() const { return impl_->options; }

void ExponentialMovingAverage::set_smoothing(double smoothing) {
  check_smoothing(smoothing);
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
  check_smoothing(smoothing);
  if (!(interval > 0.0) || !std::isfinite(interval))
    throw Error("EMA: update interval must be a finite number > 0, got " + std::to_string(interval));
  if (smoothing == 0.0) return 0.0;
  if (smoothing == 1.0) return std::numeric_limits<double>::infinity();  // never moves (and -log(1) is -0)
  return interval * std::log(2.0) / -std::log(smoothing);
}

}  // namespace baton
