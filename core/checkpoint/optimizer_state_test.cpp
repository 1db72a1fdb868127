#include "baton_test.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ops/arange.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "baton/error.h"
#include "baton/optimizer_state.h"
#include "baton/safetensors.h"
#include "error_text.h"

using baton::test::error_text;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>, double lr)>;

// A Linear(3, 2) with fixed, distinct weights, so every run starts from the same point.
torch::nn::Linear make_model() {
  torch::nn::Linear model(3, 2);
  torch::NoGradGuard no_grad;
  model->weight.copy_(at::arange(6, at::kFloat).reshape({2, 3}).mul(0.37).sin());
  model->bias.copy_(at::arange(2, at::kFloat).mul(-0.5).add(0.1));
  return model;
}

torch::nn::Linear copy_of(const torch::nn::Linear& source) {
  torch::nn::Linear copy(3, 2);
  torch::NoGradGuard no_grad;
  copy->weight.copy_(source->weight);
  copy->bias.copy_(source->bias);
  return copy;
}

baton::NamedParameters named(const torch::nn::Linear& model) {
  baton::NamedParameters out;
  for (const auto& item : model->named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

// Steps with a different batch each time, so the state carries history that a wrong restore would lose.
void train(torch::nn::Linear& model, torch::optim::Optimizer& optimizer, int first_step, int steps) {
  for (int s = first_step; s < first_step + steps; ++s) {
    at::Tensor x = at::arange(12, at::kFloat).reshape({4, 3}).mul(0.1 * (s + 1)).cos();
    at::Tensor y = at::arange(8, at::kFloat).reshape({4, 2}).mul(0.2).sub(0.05 * s);
    optimizer.zero_grad();
    model->forward(x).sub(y).pow(2).mean().backward();
    optimizer.step();
  }
}

// Through a safetensors file and the scalars' JSON text, as a checkpoint would carry it.
baton::StateDict through_disk(const baton::StateDict& state, const std::string& test) {
  auto path = (baton::test::scratch_dir(test) / "optimizer.safetensors").string();
  baton::NamedTensors tensors;
  for (const auto& key : state.tensor_keys()) tensors.emplace_back(key, state.tensor(key));
  baton::write_safetensors(path, tensors);
  baton::StateDict back;
  for (auto& [key, tensor] : baton::read_safetensors(path).tensors) back.set_tensor(key, tensor);
  back.set_scalars_json(state.scalars_json());
  return back;
}

bool same_parameters(const torch::nn::Linear& a, const torch::nn::Linear& b) {
  return torch::equal(a->weight, b->weight) && torch::equal(a->bias, b->bias);
}

// Trains `before` steps, exports, imports into a fresh optimizer (built with a different lr) over a copy of the
// parameters, then continues both for `after` steps: the parameters must agree bit for bit.
void check_bitwise_continuation(const MakeOptimizer& make, int before, int after, const std::string& test) {
  auto model = make_model();
  auto optimizer = make(model->parameters(), 0.05);
  train(model, *optimizer, 0, before);
  baton::StateDict state = through_disk(baton::export_optimizer_state(*optimizer, named(model)), test);

  auto resumed_model = copy_of(model);
  auto resumed = make(resumed_model->parameters(), 1.0);
  baton::import_optimizer_state(*resumed, named(resumed_model), state);
  CHECK(resumed->param_groups()[0].options().get_lr() == 0.05);

  auto fresh_model = copy_of(model);  // the control: a restart that forgets the optimizer state
  auto fresh = make(fresh_model->parameters(), 0.05);

  train(model, *optimizer, before, after);
  train(resumed_model, *resumed, before, after);
  train(fresh_model, *fresh, before, after);
  CHECK(same_parameters(model, resumed_model));
  if (before > 0) CHECK_FALSE(same_parameters(model, fresh_model));  // the test can tell a lost state
}

std::unique_ptr<torch::optim::Optimizer> sgd(std::vector<at::Tensor> params, double lr) {
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(lr).momentum(0.9).dampening(0.1).weight_decay(0.01).nesterov(false));
}

std::unique_ptr<torch::optim::Optimizer> sgd_nesterov(std::vector<at::Tensor> params, double lr) {
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).momentum(0.8).nesterov(true));
}

std::unique_ptr<torch::optim::Optimizer> adam(std::vector<at::Tensor> params, double lr) {
  return std::make_unique<torch::optim::Adam>(
      params, torch::optim::AdamOptions(lr).betas({0.8, 0.95}).weight_decay(0.001).amsgrad(true));
}

std::unique_ptr<torch::optim::Optimizer> adamw(std::vector<at::Tensor> params, double lr) {
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(lr).eps(1e-6));
}

struct UnsupportedOptimizer : torch::optim::Optimizer {
  explicit UnsupportedOptimizer(std::vector<at::Tensor> params)
      : Optimizer({torch::optim::OptimizerParamGroup(params)},
                  std::make_unique<torch::optim::SGDOptions>(0.1)) {}
  at::Tensor step(LossClosure) override { return {}; }
};

}  // namespace

TEST_SUITE("checkpoint") {
  TEST_CASE("optimizer state: SGD with momentum continues bitwise after export/import") {
    check_bitwise_continuation(sgd, 3, 4, "opt_sgd");
    check_bitwise_continuation(sgd_nesterov, 2, 3, "opt_sgd_nesterov");
  }

  TEST_CASE("optimizer state: Adam (amsgrad) continues bitwise after export/import") {
    check_bitwise_continuation(adam, 3, 4, "opt_adam");
  }

  TEST_CASE("optimizer state: AdamW continues bitwise after export/import") {
    check_bitwise_continuation(adamw, 3, 4, "opt_adamw");
  }

  TEST_CASE("optimizer state: before the first step there is no per-parameter state") {
    auto model = make_model();
    auto optimizer = sgd(model->parameters(), 0.05);
    auto state = baton::export_optimizer_state(*optimizer, named(model));
    CHECK(state.tensor_keys().empty());
    CHECK(state.get_string("type") == "sgd");
    CHECK(state.get_double("group0/momentum") == 0.9);
    CHECK(state.get_double("group0/dampening") == 0.1);
    CHECK(state.get_bool("group0/nesterov") == false);
    check_bitwise_continuation(sgd, 0, 3, "opt_sgd_unstepped");
    check_bitwise_continuation(adam, 0, 3, "opt_adam_unstepped");
  }

  TEST_CASE("optimizer state: layout of an exported Adam state") {
    auto model = make_model();
    auto optimizer = adam(model->parameters(), 0.05);
    train(model, *optimizer, 0, 2);
    auto state = baton::export_optimizer_state(*optimizer, named(model));
    CHECK(state.tensor_keys() == std::vector<std::string>{"weight/step", "weight/exp_avg", "weight/exp_avg_sq",
                                                          "weight/max_exp_avg_sq", "bias/step", "bias/exp_avg",
                                                          "bias/exp_avg_sq", "bias/max_exp_avg_sq"});
    CHECK(state.tensor("bias/step").item<std::int64_t>() == 2);
    CHECK(state.get_double("group0/beta1") == 0.8);
    CHECK(state.get_double("group0/beta2") == 0.95);
    CHECK(state.get_double("group0/weight_decay") == 0.001);
    CHECK(state.get_bool("group0/amsgrad"));
    CHECK(state.get_int("group0/params") == 2);
    CHECK(state.get_int("groups") == 1);
  }

  TEST_CASE("optimizer state: mismatches are reported naming the tensor") {
    auto model = make_model();
    auto optimizer = adam(model->parameters(), 0.05);
    train(model, *optimizer, 0, 1);
    const auto state = baton::export_optimizer_state(*optimizer, named(model));

    auto target_model = copy_of(model);
    auto target = adam(target_model->parameters(), 0.05);
    const auto target_names = named(target_model);

    baton::StateDict missing;
    missing.set_scalars_json(state.scalars_json());
    for (const auto& key : state.tensor_keys()) {
      if (key != "bias/exp_avg_sq") missing.set_tensor(key, state.tensor(key));
    }
    CHECK(error_text<baton::CheckpointError>([&] { baton::import_optimizer_state(*target, target_names, missing); }) ==
          "optimizer state is missing tensor 'bias/exp_avg_sq'");

    baton::StateDict wrong_shape = state;
    wrong_shape.set_tensor("weight/exp_avg", at::arange(6, at::kFloat).reshape({3, 2}));
    CHECK(error_text<baton::CheckpointError>([&] { baton::import_optimizer_state(*target, target_names, wrong_shape); }) ==
          "optimizer state tensor 'weight/exp_avg' has shape [3, 2], but parameter 'weight' has shape [2, 3]");

    baton::StateDict wrong_dtype = state;
    wrong_dtype.set_tensor("bias/exp_avg", at::arange(2, at::kDouble));
    CHECK(error_text<baton::CheckpointError>([&] { baton::import_optimizer_state(*target, target_names, wrong_dtype); }) ==
          "optimizer state tensor 'bias/exp_avg' has dtype Double, but parameter 'bias' has dtype Float");

    baton::StateDict extra = state;
    extra.set_tensor("ghost/exp_avg", at::arange(2, at::kFloat));
    CHECK(error_text<baton::CheckpointError>([&] { baton::import_optimizer_state(*target, target_names, extra); }) ==
          "optimizer state tensor 'ghost/exp_avg' belongs to no parameter of this optimizer");

    auto sgd_model = copy_of(model);
    auto sgd_optimizer = sgd(sgd_model->parameters(), 0.05);
    CHECK(error_text<baton::CheckpointError>([&] { baton::import_optimizer_state(*sgd_optimizer, named(sgd_model), state); }) ==
          "optimizer state was saved from optimizer 'adam', but this run's optimizer is 'sgd': continue with the "
          "checkpoint's optimizer (optimizer.name = \"adam\"), or start a new run");  // not "a adam" (issue 24 §11)

    baton::StateDict no_lr = state;
    no_lr.set_scalars_json(R"({"type": "adam", "groups": 1, "group0/params": 2})");
    auto message = error_text<baton::CheckpointError>([&] { baton::import_optimizer_state(*target, target_names, no_lr); });
    CHECK(message.find("'group0/lr'") != std::string::npos);

    // A failed import leaves the optimizer untouched: it has no state and its lr is the one it was built with.
    CHECK(target->state().empty());
    CHECK(target->param_groups()[0].options().get_lr() == 0.05);
  }

  TEST_CASE("optimizer state: unknown parameters and unsupported optimizers are errors") {
    auto model = make_model();
    auto optimizer = sgd(model->parameters(), 0.05);
    baton::NamedParameters only_weight = {{"weight", model->weight}};
    CHECK_THROWS_WITH_AS(baton::export_optimizer_state(*optimizer, only_weight),
                         doctest::Contains("optimizer parameter 1 of param group 0 (shape [2]) is not among the named"),
                         baton::Error);
    UnsupportedOptimizer unsupported(model->parameters());
    CHECK_THROWS_WITH_AS(baton::export_optimizer_state(unsupported, named(model)),
                         doctest::Contains("unsupported optimizer type"), baton::Error);
  }
}
