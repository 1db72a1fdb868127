#include "baton/ema.h"

#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>

#include <ATen/core/grad_mode.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include "baton/error.h"
#include "ema/ema_kernel.h"

namespace baton {
namespace {

using ema_kernel::Element;

struct ModelTensor {
  std::string name;
  at::Tensor tensor;
  bool parameter;
};

// Parameters first, then buffers, each in the module's registration order (as named_parameters/named_buffers).
std::vector<ModelTensor> model_tensors(const torch::nn::Module& model) {
  std::vector<ModelTensor> out;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    if (item.value().defined()) out.push_back({item.key(), item.value(), true});
  for (const auto& item : model.named_buffers(/*recurse=*/true))
    if (item.value().defined()) out.push_back({item.key(), item.value(), false});
  return out;
}

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

std::string shape_string(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < sizes.size(); ++i) out << (i ? ", " : "") << sizes[i];
  out << ']';
  return out.str();
}

void check_smoothing(double smoothing) {
  if (!(smoothing >= 0.0 && smoothing <= 1.0))
    throw Error("EMA: smoothing must lie in [0, 1], got " + std::to_string(smoothing));
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
    at::Tensor ema;     // the average; undefined while its storage is exchanged into the model
    at::Tensor stash;   // while swapped: the raw weights (their storage, or a backup copy)
    at::Tensor holder;  // while swapped by exchange: the model tensor that now holds the EMA's storage
  };

  EmaOptions options;
  std::vector<Entry> entries;
  std::unordered_map<std::string, std::size_t> index;
  bool initialized = false;
  bool swapped = false;
  ema_kernel::Plan plan;

  static at::Tensor current(const Entry& entry) {
    return entry.holder.defined() ? entry.holder.variable_data() : entry.ema;
  }

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

  at::Tensor make_average(const at::Tensor& weight, bool averaged) const {
    at::ScalarType dtype = weight.scalar_type();
    if (averaged && options.float32 && (dtype == at::kBFloat16 || dtype == at::kHalf)) dtype = at::kFloat;
    const c10::Device device = options.device.empty() ? weight.device() : parse_device(options.device);
    return weight.detach().to(device, dtype, /*non_blocking=*/false, /*copy=*/true, at::MemoryFormat::Contiguous);
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
      const auto expected = current(entries[i]).sizes();
      if (tensor.sizes() != expected)
        throw Error("EMA: tensor '" + name + "' has shape " + shape_string(tensor.sizes()) + " in the model but " +
                    shape_string(expected) + " in the EMA");
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
    std::vector<ema_kernel::Task> tasks;
    std::vector<std::size_t> others;
    tasks.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (auto task = kernel_task(entries[i].ema, weights[i], entries[i].averaged))
        tasks.push_back(*task);
      else
        others.push_back(i);
    }
    if (tasks != plan.tasks()) plan = ema_kernel::Plan(std::move(tasks));
    plan.run(smoothing, options.threads);
    for (std::size_t i : others) op_update(entries[i].ema, weights[i], entries[i].averaged, smoothing);
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
  for (auto& [name, tensor, parameter] : model_tensors(model)) {
    Impl::Entry entry;
    entry.name = name;
    entry.averaged = impl_->averages(name, tensor, parameter);
    entry.ema = impl_->make_average(tensor, entry.averaged);
    index.emplace(name, entries.size());
    entries.push_back(std::move(entry));
  }
  impl_->entries = std::move(entries);
  impl_->index = std::move(index);
  impl_->plan = ema_kernel::Plan();
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
  if (impl_->swapped)
    impl_->swap_out(weights);
  else
    impl_->swap_in(weights);
  impl_->swapped = !impl_->swapped;
}

bool ExponentialMovingAverage::swapped() const { return impl_->swapped; }

void ExponentialMovingAverage::copy_to(torch::nn::Module& model) const {
  impl_->require_initialized("copy_to");
  impl_->require_not_swapped("copy_to");
  const auto weights = impl_->align(model);
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < weights.size(); ++i)
    weights[i].detach().copy_(impl_->entries[i].ema, /*non_blocking=*/!impl_->entries[i].ema.is_cpu());
}

void ExponentialMovingAverage::to(const std::string& device) {
  impl_->require_not_swapped("move the EMA");
  const c10::Device target = parse_device(device);
  for (auto& entry : impl_->entries) entry.ema = entry.ema.to(target);
  impl_->options.device = device;
  impl_->plan = ema_kernel::Plan();
}

std::string ExponentialMovingAverage::device() const {
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
  for (const auto& entry : impl_->entries) total += static_cast<std::int64_t>(Impl::current(entry).nbytes());
  return total;
}

at::Tensor ExponentialMovingAverage::get(const std::string& name) const { return Impl::current(impl_->entry(name)); }

std::vector<std::pair<std::string, at::Tensor>> ExponentialMovingAverage::state_dict() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.reserve(impl_->entries.size());
  for (const auto& entry : impl_->entries)
    out.emplace_back(entry.name, Impl::current(entry).clone(at::MemoryFormat::Contiguous));
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
    const at::Tensor& expected = impl_->entries[it->second].ema;
    if (sources[it->second]) throw Error("EMA state: tensor '" + name + "' appears twice");
    if (!tensor.defined()) throw Error("EMA state: tensor '" + name + "' is undefined");
    if (tensor.sizes() != expected.sizes())
      throw Error("EMA state: tensor '" + name + "' has shape " + shape_string(tensor.sizes()) +
                  " but the EMA expects " + shape_string(expected.sizes()));
    if (tensor.scalar_type() != expected.scalar_type())
      throw Error("EMA state: tensor '" + name + "' has dtype " + std::string(c10::toString(tensor.scalar_type())) +
                  " but the EMA expects " + std::string(c10::toString(expected.scalar_type())));
    sources[it->second] = &tensor;
  }
  if (strict)
    for (std::size_t i = 0; i < sources.size(); ++i)
      if (!sources[i]) throw Error("EMA state: tensor '" + impl_->entries[i].name + "' is missing");
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < sources.size(); ++i)
    if (sources[i]) impl_->entries[i].ema.copy_(*sources[i]);
}

const EmaOptions& ExponentialMovingAverage::options() const { return impl_->options; }

void ExponentialMovingAverage::set_smoothing(double smoothing) {
  check_smoothing(smoothing);
  impl_->options.smoothing = smoothing;
}

EmaSwapGuard::EmaSwapGuard(ExponentialMovingAverage& ema, torch::nn::Module& model) : ema_(ema), model_(model) {
  if (!ema_.swapped()) {
    ema_.swap(model_);
    swapped_ = true;
  }
}

EmaSwapGuard::~EmaSwapGuard() {
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
