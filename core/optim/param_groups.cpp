#include "optim/param_groups.h"

#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include <torch/nn/module.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "baton/text.h"

namespace baton {
namespace {

bool is_kind(const std::string& entry) {
  const auto& kinds = weight_decay_kinds();
  return std::find(kinds.begin(), kinds.end(), entry) != kinds.end();
}

// The kinds each parameter is of, by name: "bias" by its own name, "norm" and "embedding" by the type of
// the module that owns it directly.
std::map<std::string, std::set<std::string>> kinds_of(const torch::nn::Module& model) {
  std::map<std::string, std::set<std::string>> kinds;
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const std::string type = item.value()->name();
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      auto& of = kinds[prefix + p.key()];
      if (p.key() == "bias") of.insert("bias");
      if (type.find("Norm") != std::string::npos) of.insert("norm");
      if (type.find("Embedding") != std::string::npos) of.insert("embedding");
    }
  }
  return kinds;
}

std::string some_names(const std::vector<std::string>& names) {
  std::string text;
  for (std::size_t i = 0; i < names.size() && i < 6; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > 6) text += ", ... (" + std::to_string(names.size()) + " in all)";
  return text;
}

std::string thousands(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The optimizer's weight decay through its options' own type (the base class has none); false for another type.
bool set_weight_decay(torch::optim::OptimizerOptions& options, double decay) {
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) return sgd->weight_decay(decay), true;
  if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) return adamw->weight_decay(decay), true;
  if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) return adam->weight_decay(decay), true;
  return false;
}

}  // namespace

const std::vector<std::string>& weight_decay_kinds() {
  static const std::vector<std::string> kinds{"bias", "norm", "embedding"};
  return kinds;
}

std::string ParamGroupPlan::summary() const {
  std::string text = std::to_string(groups.size()) + " param groups:";
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const Group& group = groups[g];
    std::string what;
    if (!group.decay) what = "no weight decay";
    if (group.lr_scale != 1.0) what += (what.empty() ? "" : ", ") + std::string("lr x") + format_number(group.lr_scale);
    if (what.empty()) what = "as configured";
    text += (g ? "; " : " ") + std::to_string(g) + " " + what + (group.rule.empty() ? "" : " (" + group.rule + ")") +
            ": " + std::to_string(group.tensors) + (group.tensors == 1 ? " tensor, " : " tensors, ") +
            thousands(group.elements) + " elements";
  }
  return text;
}

ParamGroupPlan plan_param_groups(const torch::nn::Module& model, const ParamGroupRules& rules) {
  std::vector<std::pair<std::string, at::Tensor>> parameters;
  for (const auto& p : model.named_parameters(/*recurse=*/true))
    if (p.value().defined()) parameters.emplace_back(p.key(), p.value());
  std::vector<std::string> names;
  for (const auto& [name, tensor] : parameters) names.push_back(name);
  const auto kinds = kinds_of(model);

  for (const std::string& entry : rules.weight_decay_exclude) {
    if (entry.empty()) throw ParamGroupRuleError("weight_decay_exclude", "expected a kind or a glob, got \"\"");
    if (is_kind(entry)) continue;  // a kind may have no parameters in this model (no norm layers): no typo there
    if (std::none_of(names.begin(), names.end(), [&](const std::string& n) { return glob_match(entry, n); }))
      throw ParamGroupRuleError("weight_decay_exclude",
                                "\"" + entry + "\" is no kind (bias, norm, embedding) and matches no parameter " +
                                    "of the model (its parameters: " + some_names(names) + ")");
  }
  for (const auto& [glob, scale] : rules.lr_scale) {
    if (!(scale > 0)) throw ParamGroupRuleError("lr_scale", "\"" + glob + "\": expected a multiplier above 0");
    if (std::none_of(names.begin(), names.end(), [&](const std::string& n) { return glob_match(glob, n); }))
      throw ParamGroupRuleError("lr_scale", "\"" + glob + "\" matches no parameter of the model (its parameters: " +
                                                some_names(names) + ")");
  }

  ParamGroupPlan plan;
  plan.groups.push_back({});  // the optimizer as configured, first even when empty
  // Per group: which weight_decay_exclude entries put tensors there.
  std::vector<std::vector<bool>> excluded_by(1, std::vector<bool>(rules.weight_decay_exclude.size(), false));
  std::vector<std::string> lr_rules(1);
  std::map<std::pair<bool, std::string>, std::size_t> index{{{true, ""}, 0}};  // (decay, lr_scale glob) -> group
  for (const auto& [name, tensor] : parameters) {
    const auto found = kinds.find(name);
    std::vector<bool> matched(rules.weight_decay_exclude.size(), false);
    bool decay = true;
    for (std::size_t r = 0; r < rules.weight_decay_exclude.size(); ++r) {
      const std::string& entry = rules.weight_decay_exclude[r];
      matched[r] = is_kind(entry) ? found != kinds.end() && found->second.count(entry) > 0 : glob_match(entry, name);
      decay = decay && !matched[r];
    }
    std::string lr_rule;
    double scale = 1.0;
    for (const auto& [glob, value] : rules.lr_scale)
      if (glob_match(glob, name)) {
        lr_rule = glob;
        scale = value;
        break;
      }
    // Groups differ by the glob that scaled them, so two globs of the same multiplier stay apart in the summary.
    const auto [at, added] = index.emplace(std::make_pair(decay, lr_rule), plan.groups.size());
    if (added) {
      ParamGroupPlan::Group group;
      group.decay = decay;
      group.lr_scale = scale;
      plan.groups.push_back(group);
      excluded_by.emplace_back(rules.weight_decay_exclude.size(), false);
      lr_rules.push_back(lr_rule);
    }
    const std::size_t g = at->second;
    for (std::size_t r = 0; r < matched.size(); ++r) excluded_by[g][r] = excluded_by[g][r] || matched[r];
    ++plan.groups[g].tensors;
    plan.groups[g].elements += tensor.numel();
    plan.group_of[name] = g;
  }
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {  // "bias, norm; classifier.*"
    std::string rule;
    for (std::size_t r = 0; r < excluded_by[g].size(); ++r)
      if (excluded_by[g][r]) rule += (rule.empty() ? "" : ", ") + rules.weight_decay_exclude[r];
    if (!lr_rules[g].empty()) rule += (rule.empty() ? "" : "; ") + lr_rules[g];
    plan.groups[g].rule = rule;
  }
  return plan;
}

void apply_param_groups(torch::optim::Optimizer& optimizer, const NamedTensors& stepped, const ParamGroupPlan& plan) {
  if (plan.trivial()) return;
  auto& groups = optimizer.param_groups();
  if (groups.size() != 1)
    throw Error("optimizer: weight_decay_exclude and lr_scale split the optimizer's parameters into groups, but "
                "it has " + std::to_string(groups.size()) + " param groups already (build it over one)");
  std::unique_ptr<torch::optim::OptimizerOptions> base = groups.front().options().clone();
  std::map<const void*, const std::string*> name_of;
  for (const auto& [name, tensor] : stepped) name_of[tensor.unsafeGetTensorImpl()] = &name;
  std::vector<std::vector<at::Tensor>> members(plan.groups.size());
  for (const at::Tensor& tensor : groups.front().params()) {  // in the optimizer's order, group by group
    auto named = name_of.find(tensor.unsafeGetTensorImpl());
    if (named == name_of.end())
      throw Error("optimizer: a tensor it steps (shape " + format_shape(tensor.sizes()) +
                  ") is no parameter of the model, so weight_decay_exclude and lr_scale cannot place it");
    auto found = plan.group_of.find(*named->second);
    if (found == plan.group_of.end())
      throw Error("optimizer: parameter '" + *named->second + "' is not among the model's parameters");
    members[found->second].push_back(tensor);
  }
  if (!set_weight_decay(*base->clone(), 0.0) && std::any_of(plan.groups.begin(), plan.groups.end(),
                                                             [](const auto& group) { return !group.decay; }))
    throw Error("optimizer: weight_decay_exclude sets weight decay per group on torch::optim::SGD, Adam and "
                "AdamW only; this optimizer's options are of another type");
  groups.clear();
  for (std::size_t g = 0; g < plan.groups.size(); ++g) optimizer.add_param_group({members[g], base->clone()});
  // The groups' own values are set once they are the optimizer's: newer LibTorch (2.15 here) merges the options
  // given to add_param_group with the optimizer's defaults, field by field, taking the default's value wherever the
  // given one equals its type's default, so a weight decay of 0 passed in came back as the optimizer's 0.5.
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {
    torch::optim::OptimizerOptions& options = groups[g].options();
    options.set_lr(base->get_lr() * plan.groups[g].lr_scale);
    if (!plan.groups[g].decay) set_weight_decay(options, 0.0);
  }
}

}  // namespace baton
