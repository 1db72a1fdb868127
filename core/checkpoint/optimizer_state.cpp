#include "baton/optimizer_state.h"

#include <map>
#include <memory>
#include <set>
#include <typeinfo>

#include <ATen/ops/scalar_tensor.h>
#include <c10/util/Type.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "baton/text.h"
#include "baton/error.h"
#include "checkpoint/optimizer_compat.h"

namespace baton {
namespace {

using optimizer_compat::state_key;

std::string group_prefix(std::size_t group) { return "group" + std::to_string(group) + "/"; }

class ParameterNames {
 public:
  explicit ParameterNames(const NamedParameters& parameters) {
    for (const auto& [name, tensor] : parameters) by_impl_.emplace(tensor.unsafeGetTensorImpl(), name);
  }
  const std::string& of(const at::Tensor& param, std::size_t group, std::size_t index) const {
    auto found = by_impl_.find(param.unsafeGetTensorImpl());
    if (found == by_impl_.end()) {
      throw Error("optimizer parameter " + std::to_string(index) + " of param group " + std::to_string(group) +
                  " (shape " + format_shape(param.sizes()) + ") is not among the named parameters");
    }
    return found->second;
  }

 private:
  std::map<const void*, std::string> by_impl_;
};

// The saved buffers of one parameter, for import: every buffer taken is checked against the parameter and marked
// used, so tensors left over at the end (state of parameters this optimizer does not have) can be reported.
class SavedBuffers {
 public:
  SavedBuffers(const StateDict& state, std::set<std::string>& used, const std::string& name, const at::Tensor& param)
      : state_(state), used_(used), name_(name), param_(param) {}

  bool has(const std::string& buffer) const { return state_.has_tensor(key(buffer)); }

  /// A copy on the parameter's device, shaped and typed like the parameter.
  at::Tensor like_param(const std::string& buffer) const {
    at::Tensor saved = take(buffer);
    if (saved.sizes() != param_.sizes()) {
      throw CheckpointError("optimizer state tensor '" + key(buffer) + "' has shape " + format_shape(saved.sizes()) +
                            ", but parameter '" + name_ + "' has shape " + format_shape(param_.sizes()));
    }
    if (saved.scalar_type() != param_.scalar_type()) {
      throw CheckpointError("optimizer state tensor '" + key(buffer) + "' has dtype " +
                            std::string(c10::toString(saved.scalar_type())) + ", but parameter '" + name_ +
                            "' has dtype " + std::string(c10::toString(param_.scalar_type())));
    }
    return saved.to(param_.device(), /*non_blocking=*/false, /*copy=*/true);
  }

  std::int64_t count(const std::string& buffer) const {
    at::Tensor saved = take(buffer);
    if (saved.numel() != 1 || saved.scalar_type() != at::kLong) {
      throw CheckpointError("optimizer state tensor '" + key(buffer) + "' must be a single int64 value, got " +
                            std::string(c10::toString(saved.scalar_type())) + " of shape " + format_shape(saved.sizes()));
    }
    return saved.item<std::int64_t>();
  }

 private:
  std::string key(const std::string& buffer) const { return name_ + "/" + buffer; }

  at::Tensor take(const std::string& buffer) const {
    if (!has(buffer)) throw CheckpointError("optimizer state is missing tensor '" + key(buffer) + "'");
    used_.insert(key(buffer));
    return state_.tensor(key(buffer));
  }

  const StateDict& state_;
  std::set<std::string>& used_;
  const std::string& name_;
  const at::Tensor& param_;
};

// What differs between optimizer types: their options and their per-parameter state.
struct SgdTraits {
  using Optimizer = torch::optim::SGD;
  using Options = torch::optim::SGDOptions;
  using ParamState = torch::optim::SGDParamState;
  static constexpr const char* kType = "sgd";

  static void save_options(const Options& o, const std::string& p, StateDict& sd) {
    sd.set_double(p + "lr", o.lr());
    sd.set_double(p + "momentum", o.momentum());
    sd.set_double(p + "dampening", o.dampening());
    sd.set_double(p + "weight_decay", o.weight_decay());
    sd.set_bool(p + "nesterov", o.nesterov());
  }
  static void load_options(Options& o, const std::string& p, const StateDict& sd) {
    o.lr(sd.get_double(p + "lr"));
    o.momentum(sd.get_double(p + "momentum"));
    o.dampening(sd.get_double(p + "dampening"));
    o.weight_decay(sd.get_double(p + "weight_decay"));
    o.nesterov(sd.get_bool(p + "nesterov"));
  }
  static void save_state(const ParamState& s, const std::string& name, StateDict& sd) {
    if (s.momentum_buffer().defined()) sd.set_tensor(name + "/momentum_buffer", s.momentum_buffer());
  }
  // SGD creates a parameter's state at its first step with momentum; before that there is nothing to restore.
  static std::unique_ptr<ParamState> load_state(const SavedBuffers& saved, const Options&) {
    if (!saved.has("momentum_buffer")) return nullptr;
    auto state = std::make_unique<ParamState>();
    state->momentum_buffer(saved.like_param("momentum_buffer"));
    return state;
  }
};

// Adam and AdamW share their options and state layouts under different type names.
template <typename OptimizerT, typename OptionsT, typename ParamStateT, const char* const* TypeName>
struct AdamFamilyTraits {
  using Optimizer = OptimizerT;
  using Options = OptionsT;
  using ParamState = ParamStateT;
  static constexpr const char* kType = *TypeName;

  static void save_options(const Options& o, const std::string& p, StateDict& sd) {
    sd.set_double(p + "lr", o.lr());
    sd.set_double(p + "beta1", std::get<0>(o.betas()));
    sd.set_double(p + "beta2", std::get<1>(o.betas()));
    sd.set_double(p + "eps", o.eps());
    sd.set_double(p + "weight_decay", o.weight_decay());
    sd.set_bool(p + "amsgrad", o.amsgrad());
  }
  static void load_options(Options& o, const std::string& p, const StateDict& sd) {
    o.lr(sd.get_double(p + "lr"));
    o.betas(std::make_tuple(sd.get_double(p + "beta1"), sd.get_double(p + "beta2")));
    o.eps(sd.get_double(p + "eps"));
    o.weight_decay(sd.get_double(p + "weight_decay"));
    o.amsgrad(sd.get_bool(p + "amsgrad"));
  }
  static void save_state(const ParamState& s, const std::string& name, StateDict& sd) {
    sd.set_tensor(name + "/step", at::scalar_tensor(s.step(), at::kLong));
    sd.set_tensor(name + "/exp_avg", s.exp_avg());
    sd.set_tensor(name + "/exp_avg_sq", s.exp_avg_sq());
    if (s.max_exp_avg_sq().defined()) sd.set_tensor(name + "/max_exp_avg_sq", s.max_exp_avg_sq());
  }
  static std::unique_ptr<ParamState> load_state(const SavedBuffers& saved, const Options& options) {
    if (!saved.has("step") && !saved.has("exp_avg") && !saved.has("exp_avg_sq")) return nullptr;  // never stepped
    auto state = std::make_unique<ParamState>();
    state->step(saved.count("step"));
    state->exp_avg(saved.like_param("exp_avg"));
    state->exp_avg_sq(saved.like_param("exp_avg_sq"));
    if (options.amsgrad()) state->max_exp_avg_sq(saved.like_param("max_exp_avg_sq"));
    return state;
  }
};

constexpr const char* kAdamName = "adam";
constexpr const char* kAdamWName = "adamw";
using AdamTraits = AdamFamilyTraits<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState, &kAdamName>;
using AdamWTraits =
    AdamFamilyTraits<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState, &kAdamWName>;

template <typename Traits>
StateDict export_with(const torch::optim::Optimizer& optimizer, const ParameterNames& names) {
  StateDict sd;
  sd.set_string("type", Traits::kType);
  const auto& groups = optimizer.param_groups();
  sd.set_int("groups", static_cast<std::int64_t>(groups.size()));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = group_prefix(g);
    Traits::save_options(static_cast<const typename Traits::Options&>(groups[g].options()), prefix, sd);
    sd.set_int(prefix + "params", static_cast<std::int64_t>(groups[g].params().size()));
    for (std::size_t i = 0; i < groups[g].params().size(); ++i) {
      const at::Tensor& param = groups[g].params()[i];
      const std::string& name = names.of(param, g, i);  // checked even without state, so a bad list fails early
      auto found = optimizer.state().find(state_key(param));
      if (found == optimizer.state().end()) continue;
      Traits::save_state(static_cast<const typename Traits::ParamState&>(*found->second), name, sd);
    }
  }
  return sd;
}

void check_layout(const torch::optim::Optimizer& optimizer, const StateDict& state, const char* type) {
  if (state.get_string("type") != type) {
    throw CheckpointError("optimizer state was saved from optimizer '" + state.get_string("type") +
                          "', but this run's optimizer is '" + type + "': continue with the checkpoint's optimizer " +
                          "(optimizer.name = \"" + state.get_string("type") + "\"), or start a new run");
  }
  const auto& groups = optimizer.param_groups();
  if (state.get_int("groups") != static_cast<std::int64_t>(groups.size())) {
    throw CheckpointError("optimizer state has " + std::to_string(state.get_int("groups")) +
                          " param groups, but the optimizer has " + std::to_string(groups.size()));
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto saved = state.get_int(group_prefix(g) + "params");
    if (saved != static_cast<std::int64_t>(groups[g].params().size())) {
      throw CheckpointError("optimizer state has " + std::to_string(saved) + " parameters in param group " +
                            std::to_string(g) + ", but the optimizer has " + std::to_string(groups[g].params().size()));
    }
  }
}

template <typename Traits>
void import_with(torch::optim::Optimizer& optimizer, const ParameterNames& names, const StateDict& state) {
  check_layout(optimizer, state, Traits::kType);
  // Built completely before the optimizer is touched, so a bad checkpoint leaves the optimizer as it was.
  std::vector<typename Traits::Options> options;
  std::vector<std::pair<optimizer_compat::StateKey, std::unique_ptr<typename Traits::ParamState>>> param_states;
  std::set<std::string> used;
  auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    options.push_back(static_cast<const typename Traits::Options&>(groups[g].options()));
    Traits::load_options(options.back(), group_prefix(g), state);
    for (std::size_t i = 0; i < groups[g].params().size(); ++i) {
      const at::Tensor& param = groups[g].params()[i];
      SavedBuffers saved(state, used, names.of(param, g, i), param);
      param_states.emplace_back(state_key(param), Traits::load_state(saved, options.back()));
    }
  }
  for (const auto& key : state.tensor_keys()) {
    if (!used.count(key)) {
      throw CheckpointError("optimizer state tensor '" + key + "' belongs to no parameter of this optimizer");
    }
  }
  for (std::size_t g = 0; g < groups.size(); ++g) static_cast<typename Traits::Options&>(groups[g].options()) = options[g];
  for (auto& [key, param_state] : param_states) {
    if (param_state) {
      optimizer.state()[key] = std::move(param_state);
    } else {
      optimizer.state().erase(key);
    }
  }
}

[[noreturn]] void unsupported(const torch::optim::Optimizer& optimizer) {
  throw Error(std::string("optimizer state: unsupported optimizer type ") + c10::demangle(typeid(optimizer).name()) +
              " (supported: torch::optim::SGD, Adam, AdamW)");
}

}  // namespace

StateDict export_optimizer_state(const torch::optim::Optimizer& optimizer, const NamedParameters& parameters) {
  const ParameterNames names(parameters);
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return export_with<SgdTraits>(optimizer, names);
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return export_with<AdamWTraits>(optimizer, names);
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return export_with<AdamTraits>(optimizer, names);
  unsupported(optimizer);
}

void import_optimizer_state(torch::optim::Optimizer& optimizer, const NamedParameters& parameters,
                            const StateDict& state) {
  const ParameterNames names(parameters);
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) return import_with<SgdTraits>(optimizer, names, state);
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) return import_with<AdamWTraits>(optimizer, names, state);
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) return import_with<AdamTraits>(optimizer, names, state);
  unsupported(optimizer);
}

}  // namespace baton
