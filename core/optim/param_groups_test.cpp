// The optimizer's param groups from weight_decay_exclude and lr_scale: which parameter lands where (by kind and by
// glob, counted by hand on a small model), the effect on a step (hand-computed from SGD's and AdamW's update rules),
// and the errors for a glob that matches nothing.
#include "baton_test.h"

#include <algorithm>
#include <map>

#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros_like.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "baton/model_tensors.h"
#include "optim/param_groups.h"

using namespace baton;

namespace {

// 0: Embedding(10, 4) 40; 1: Linear(4, 3) 12 + 3; 2: BatchNorm1d(3) 3 + 3; 3: Linear(3, 2) 6 + 2.
torch::nn::Sequential small_model() {
  return torch::nn::Sequential(torch::nn::Embedding(10, 4), torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3),
                               torch::nn::Linear(3, 2));
}

ParamGroupRules rules(std::vector<std::string> exclude, std::vector<std::pair<std::string, double>> scale = {}) {
  ParamGroupRules r;
  r.weight_decay_exclude = std::move(exclude);
  r.lr_scale = std::move(scale);
  return r;
}

}  // namespace

TEST_SUITE("optim") {
  TEST_CASE("issue 41: weight_decay_exclude by kind and glob, lr_scale by the first glob that matches") {
    torch::nn::Sequential model = small_model();
    const ParamGroupPlan plan = plan_param_groups(*model, rules({"bias", "norm"}));
    REQUIRE(plan.groups.size() == 2);
    CHECK(plan.groups[0].decay);
    CHECK(plan.groups[0].tensors == 3);  // the embedding's and both linear layers' weights
    CHECK(plan.groups[0].elements == 40 + 12 + 6);
    CHECK_FALSE(plan.groups[1].decay);
    CHECK(plan.groups[1].tensors == 4);  // two linear biases, the norm's weight and bias
    CHECK(plan.groups[1].elements == 3 + 3 + 3 + 2);
    CHECK(plan.groups[1].rule == "bias, norm");
    CHECK(plan.group_of.at("2.weight") == 1);
    CHECK(plan.group_of.at("1.weight") == 0);
    CHECK(plan.summary() == "2 param groups: 0 as configured: 3 tensors, 58 elements; 1 no weight decay (bias, norm): "
                            "4 tensors, 11 elements");

    const ParamGroupPlan embedding = plan_param_groups(*model, rules({"embedding", "3.*"}));
    CHECK(embedding.group_of.at("0.weight") == 1);
    CHECK(embedding.group_of.at("3.bias") == 1);
    CHECK(embedding.group_of.at("1.bias") == 0);
    CHECK(embedding.groups[1].rule == "embedding, 3.*");

    // The first glob that matches sets the multiplier: "3.bias" is scaled by 5, "3.weight" by 0.5.
    const ParamGroupPlan scaled = plan_param_groups(*model, rules({}, {{"3.bias", 5.0}, {"3.*", 0.5}}));
    REQUIRE(scaled.groups.size() == 3);
    CHECK(scaled.groups[scaled.group_of.at("3.bias")].lr_scale == 5.0);
    CHECK(scaled.groups[scaled.group_of.at("3.weight")].lr_scale == 0.5);
    CHECK(scaled.group_of.at("1.weight") == 0);
    CHECK(scaled.groups[0].lr_scale == 1.0);

    // A glob that matches nothing is a typo; a kind the model has none of is not.
    CHECK_THROWS_WITH_AS(plan_param_groups(*model, rules({"bias", "classifer.*"})),
                         "optimizer.weight_decay_exclude: \"classifer.*\" is no kind (bias, norm, embedding) and "
                         "matches no parameter of the model (its parameters: 0.weight, 1.weight, 1.bias, 2.weight, "
                         "2.bias, 3.weight, ... (7 in all))",
                         ParamGroupRuleError);
    CHECK_THROWS_WITH_AS(plan_param_groups(*model, rules({}, {{"head.*", 2.0}})),
                         doctest::Contains("optimizer.lr_scale: \"head.*\" matches no parameter of the model"),
                         ParamGroupRuleError);
    torch::nn::Sequential no_norm(torch::nn::Linear(2, 2));
    CHECK(plan_param_groups(*no_norm, rules({"norm"})).groups.size() == 1);
  }

  TEST_CASE("issue 41: an excluded parameter keeps its value under weight decay; a scaled group steps lr x scale") {
    torch::nn::Sequential model = small_model();
    const NamedTensors named = named_model_tensors(*model, /*buffers=*/false);
    const ParamGroupPlan plan = plan_param_groups(*model, rules({"bias", "norm"}, {{"3.*", 10.0}}));
    // SGD without momentum, lr 0.1, weight decay 0.5, gradients zero: a decayed p becomes p - 0.1 * 0.5 * p = 0.95 p;
    // with lr x10 it becomes p - 1.0 * 0.5 * p = 0.5 p; an excluded one stays p.
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).weight_decay(0.5));
    apply_param_groups(sgd, named, plan);
    REQUIRE(sgd.param_groups().size() == 4);  // as configured; bias+norm; 3.weight; 3.bias
    std::map<std::string, at::Tensor> before;
    for (const auto& [name, tensor] : named) {
      before[name] = tensor.detach().clone();
      tensor.mutable_grad() = at::zeros_like(tensor);
    }
    sgd.step();
    const auto ratio = [&](const std::string& name) {
      const at::Tensor& now =
          std::find_if(named.begin(), named.end(), [&](const auto& n) { return n.first == name; })->second;
      return (now.detach() / before[name]).mean().item<double>();
    };
    CHECK(ratio("0.weight") == doctest::Approx(0.95).epsilon(1e-6));
    CHECK(ratio("1.weight") == doctest::Approx(0.95).epsilon(1e-6));
    CHECK(ratio("1.bias") == doctest::Approx(1.0).epsilon(1e-9));
    CHECK(ratio("2.weight") == doctest::Approx(1.0).epsilon(1e-9));
    CHECK(ratio("3.weight") == doctest::Approx(0.5).epsilon(1e-6));
    CHECK(ratio("3.bias") == doctest::Approx(1.0).epsilon(1e-9));  // scaled, but excluded from the decay

    // AdamW decays decoupled: p * (1 - lr * wd) before the Adam update, which zero gradients leave at 0.
    torch::nn::Sequential again = small_model();
    torch::optim::AdamW adamw(again->parameters(), torch::optim::AdamWOptions(0.1).weight_decay(0.5));
    apply_param_groups(adamw, named_model_tensors(*again, false), plan_param_groups(*again, rules({"bias"})));
    const at::Tensor weight = again[1]->named_parameters()["weight"];
    const at::Tensor bias = again[1]->named_parameters()["bias"];
    const at::Tensor w0 = weight.detach().clone(), b0 = bias.detach().clone();
    for (auto& p : again->parameters()) p.mutable_grad() = at::zeros_like(p);
    adamw.step();
    CHECK(at::allclose(weight.detach(), w0 * 0.95, 1e-6, 1e-7));
    CHECK(at::equal(bias.detach(), b0));

  }

  TEST_CASE("issue 41: param groups need one group to split and an optimizer whose weight decay baton can set") {
    torch::nn::Sequential model = small_model();
    const NamedTensors named = named_model_tensors(*model, false);
    torch::optim::SGD two({model[1]->parameters()[0]}, torch::optim::SGDOptions(0.1));
    two.add_param_group(torch::optim::OptimizerParamGroup({model[1]->parameters()[1]}));
    CHECK_THROWS_WITH_AS(apply_param_groups(two, named, plan_param_groups(*model, rules({"bias"}))),
                         doctest::Contains("it has 2 param groups already"), Error);
    // A tensor that is no parameter of the model cannot be placed.
    const at::Tensor stray = at::ones({3}).requires_grad_();
    torch::optim::SGD foreign({stray}, torch::optim::SGDOptions(0.1));
    CHECK_THROWS_WITH_AS(apply_param_groups(foreign, named, plan_param_groups(*model, rules({"bias"}))),
                         doctest::Contains("is no parameter of the model"), Error);
  }
}
