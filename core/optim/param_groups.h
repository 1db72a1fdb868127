#pragma once
// The optimizer's param groups from [optimizer] weight_decay_exclude and lr_scale (TrainerSettings::param_groups):
// no weight decay on biases and normalisation weights, learning-rate multipliers per part of the model. The plan is
// made once from the model's parameter names (the same on every rank and in every sharding mode) and applied to the
// optimizer the run steps, whose tensors may be the model's parameters or a rank's shards of them, known by name.
// Group 0 is always the optimizer as configured (its lr, its weight decay), even when empty, so `lr` in the log and
// the schedule's base stay the configured ones, and every rank has the same groups in the same order (a checkpoint's
// group i is the same group at any rank).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/model_tensors.h"
#include "baton/settings.h"

namespace torch::optim {
class Optimizer;
}

namespace baton {

/// A rule that cannot apply to this model (a glob no parameter matches), naming its key ("weight_decay_exclude",
/// "lr_scale"), so the config's reader can point at the line.
class ParamGroupRuleError : public Error {
 public:
  ParamGroupRuleError(std::string key, const std::string& message)
      : Error("optimizer." + key + ": " + message), key_(std::move(key)), detail_(message) {}
  const std::string& key() const { return key_; }
  const std::string& detail() const { return detail_; }  // the message without the key

 private:
  std::string key_;
  std::string detail_;
};

struct ParamGroupPlan {
  struct Group {
    bool decay = true;       // false: weight decay 0
    double lr_scale = 1.0;   // times the optimizer's lr (and the schedule's)
    std::string rule;        // "bias, norm" or "classifier.*": what put its parameters here
    std::int64_t tensors = 0;
    std::int64_t elements = 0;
  };
  std::vector<Group> groups;                    // [0]: decayed, scale 1
  std::map<std::string, std::size_t> group_of;  // parameter name -> index in groups
  /// One group only: the optimizer as it was built.
  bool trivial() const { return groups.size() <= 1; }
  /// "3 param groups: 0 (as configured) 8 tensors 102,400 elements; 1 no weight decay (bias, norm) ...".
  std::string summary() const;
};

/// The kinds weight_decay_exclude names besides globs: "bias" (parameters named *.bias or bias), "norm" (the
/// parameters of a module whose type name contains "Norm": BatchNorm, LayerNorm, GroupNorm, an RMSNorm of one's
/// own), "embedding" (those of a module whose type name contains "Embedding").
const std::vector<std::string>& weight_decay_kinds();

/// The groups of `model`'s parameters under `rules`: weight_decay_exclude entries are kinds or globs
/// over dotted names, lr_scale's globs are tried in order and the first that matches a name sets its multiplier.
/// Throws ParamGroupRuleError for a glob that matches no parameter (a typo would silently do nothing).
ParamGroupPlan plan_param_groups(const torch::nn::Module& model, const ParamGroupRules& rules);

/// Splits `optimizer`'s one param group into the plan's groups, `stepped` naming the tensors it steps (the model's
/// parameters, or a rank's shards of them under the same names). Each group's options are a copy of the optimizer's with the lr scaled and,
/// for an excluded group, weight decay 0. Throws Error when the optimizer has several groups already, or when
/// weight decay must be changed on an optimizer type other than SGD, Adam and AdamW.
void apply_param_groups(torch::optim::Optimizer& optimizer, const NamedTensors& stepped, const ParamGroupPlan& plan);

}  // namespace baton
