#include "optim/capturable_step.h"

#include <cmath>
#include <tuple>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "baton/error.h"
#include "checkpoint/optimizer_compat.h"

namespace baton::optim {

// Outside the anonymous namespace: Group (a member type of an exported class) holds one.
enum class Kind { sgd, adam, adamw };

namespace {

// The optimizer's kind, or none with why not.
bool kind_of(const torch::optim::Optimizer& optimizer, Kind& kind, std::string& why) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return kind = Kind::sgd, true;
  // AdamW before Adam: neither derives from the other in LibTorch, but the order keeps that question out.
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return kind = Kind::adamw, true;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return kind = Kind::adam, true;
  why = "the optimizer is not one of sgd, adam, adamw (the optimizers whose step baton records with a rate that "
        "changes per step)";
  return false;
}

template <class Options>
bool amsgrad(const torch::optim::OptimizerParamGroup& group) {
  const auto* options = dynamic_cast<const Options*>(&group.options());
  return options && options->amsgrad();
}

template <class ParamState>
ParamState* state_of(torch::optim::Optimizer& optimizer, const at::Tensor& p) {
  auto& states = optimizer.state();
  const auto it = states.find(optimizer_compat::state_key(p));
  return it == states.end() ? nullptr : dynamic_cast<ParamState*>(it->second.get());
}

at::Tensor device_scalar(const at::Tensor& like) {
  return at::empty({}, like.options().dtype(at::kFloat));
}

}  // namespace

struct CapturableStep::Group {
  Kind kind = Kind::sgd;
  torch::optim::OptimizerOptions* options = nullptr;
  std::vector<at::Tensor> params;
  // SGD: each parameter's momentum buffer (undefined without momentum). Adam, AdamW: the moments and the state
  // whose step count prepare() advances.
  std::vector<at::Tensor> momentum;
  std::vector<torch::optim::AdamParamState*> adam;
  std::vector<torch::optim::AdamWParamState*> adamw;
  // Filled by prepare(): SGD: -lr. Adam, AdamW: -lr / bias_correction1, sqrt(bias_correction2), and AdamW's
  // decoupled decay factor 1 - lr * weight_decay.
  at::Tensor neg_rate, correction2_sqrt, decay;
};

std::string CapturableStep::refusal(const torch::optim::Optimizer& optimizer) {
  Kind kind;
  std::string why;
  if (!kind_of(optimizer, kind, why)) return why;
  for (const auto& group : optimizer.param_groups())
    if (amsgrad<torch::optim::AdamOptions>(group) || amsgrad<torch::optim::AdamWOptions>(group))
      return "amsgrad keeps a running maximum that baton's recorded step does not compute";
  return "";
}

CapturableStep::CapturableStep(torch::optim::Optimizer& optimizer) {
  Kind kind;
  std::string why;
  if (!kind_of(optimizer, kind, why)) throw Error(why);
  if (const std::string no = refusal(optimizer); !no.empty()) throw Error(no);
  std::size_t group_index = 0;
  for (auto& source : optimizer.param_groups()) {
    Group g;
    g.kind = kind;
    g.options = &source.options();
    std::int64_t steps = -1;
    for (const auto& p : source.params()) {
      if (!p.grad().defined()) continue;
      const auto where = [&] {
        return "parameter " + std::to_string(g.params.size()) + " of group " + std::to_string(group_index) +
               " (shape " + std::to_string(p.dim()) + "-d)";
      };
      if (kind == Kind::sgd) {
        const auto& o = static_cast<const torch::optim::SGDOptions&>(source.options());
        at::Tensor buffer;
        if (o.momentum() != 0) {
          auto* s = state_of<torch::optim::SGDParamState>(optimizer, p);
          if (!s || !s->momentum_buffer().defined())
            throw Error("the optimizer has no momentum buffer yet for " + where() + ": record its step after one " +
                        "step of its own");
          buffer = s->momentum_buffer();
        }
        g.momentum.push_back(buffer);
      } else {
        std::int64_t step = 0;
        if (kind == Kind::adam) {
          auto* s = state_of<torch::optim::AdamParamState>(optimizer, p);
          if (!s) throw Error("the optimizer has no state yet for " + where() + ": record its step after one step of its own");
          g.adam.push_back(s);
          step = s->step();
        } else {
          auto* s = state_of<torch::optim::AdamWParamState>(optimizer, p);
          if (!s) throw Error("the optimizer has no state yet for " + where() + ": record its step after one step of its own");
          g.adamw.push_back(s);
          step = s->step();
        }
        if (steps >= 0 && step != steps)
          throw Error("the parameters of optimizer group " + std::to_string(group_index) + " are at different " +
                      "step counts (" + std::to_string(steps) + " and " + std::to_string(step) + "): one bias " +
                      "correction per group cannot serve them");
        steps = step;
      }
      g.params.push_back(p);
    }
    if (!g.params.empty()) {
      g.neg_rate = device_scalar(g.params.front());
      g.correction2_sqrt = device_scalar(g.params.front());
      g.decay = device_scalar(g.params.front());
    }
    groups_.push_back(std::move(g));
    ++group_index;
  }
}

CapturableStep::~CapturableStep() = default;

void CapturableStep::prepare() {
  for (auto& g : groups_) {
    if (g.params.empty()) continue;
    if (g.kind == Kind::sgd) {
      g.neg_rate.fill_(-static_cast<const torch::optim::SGDOptions&>(*g.options).lr());
      continue;
    }
    // Adam's own step: step += 1, then the corrections of the new count (LibTorch's adam.cpp / adamw.cpp).
    std::int64_t step = 0;
    for (auto* s : g.adam) s->step(step = s->step() + 1);
    for (auto* s : g.adamw) s->step(step = s->step() + 1);
    double lr = 0, beta1 = 0, beta2 = 0, decay = 0;
    if (g.kind == Kind::adam) {
      const auto& o = static_cast<const torch::optim::AdamOptions&>(*g.options);
      std::tie(beta1, beta2) = o.betas();
      lr = o.lr();
    } else {
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(*g.options);
      std::tie(beta1, beta2) = o.betas();
      lr = o.lr();
      decay = o.weight_decay();
    }
    const double correction1 = 1 - std::pow(beta1, static_cast<double>(step));
    const double correction2 = 1 - std::pow(beta2, static_cast<double>(step));
    g.neg_rate.fill_(-(lr / correction1));
    g.correction2_sqrt.fill_(std::sqrt(correction2));
    g.decay.fill_(1 - lr * decay);
  }
}

void CapturableStep::retract() {
  for (auto& g : groups_) {
    for (auto* s : g.adam) s->step(s->step() - 1);
    for (auto* s : g.adamw) s->step(s->step() - 1);
  }
}

void CapturableStep::step() {
  const at::NoGradGuard no_grad;
  for (auto& g : groups_) {
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      at::Tensor& p = g.params[i];
      at::Tensor grad = p.grad();
      if (g.kind == Kind::sgd) {
        const auto& o = static_cast<const torch::optim::SGDOptions&>(*g.options);
        if (o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
        if (o.momentum() != 0) {
          at::Tensor& buffer = g.momentum[i];
          buffer.mul_(o.momentum()).add_(grad, 1 - o.dampening());
          grad = o.nesterov() ? grad.add(buffer, o.momentum()) : buffer;
        }
        p.addcmul_(grad, g.neg_rate);  // p - lr * d, the rate read from the device
        continue;
      }
      double beta1 = 0, beta2 = 0, eps = 0;
      at::Tensor exp_avg, exp_avg_sq;
      if (g.kind == Kind::adam) {
        const auto& o = static_cast<const torch::optim::AdamOptions&>(*g.options);
        std::tie(beta1, beta2) = o.betas();
        eps = o.eps();
        if (o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
        exp_avg = g.adam[i]->exp_avg();
        exp_avg_sq = g.adam[i]->exp_avg_sq();
      } else {
        const auto& o = static_cast<const torch::optim::AdamWOptions&>(*g.options);
        std::tie(beta1, beta2) = o.betas();
        eps = o.eps();
        if (o.weight_decay() != 0) p.mul_(g.decay);
        exp_avg = g.adamw[i]->exp_avg();
        exp_avg_sq = g.adamw[i]->exp_avg_sq();
      }
      exp_avg.mul_(beta1).add_(grad, 1 - beta1);
      exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const at::Tensor denom = (exp_avg_sq.sqrt() / g.correction2_sqrt).add_(eps);
      // LibTorch: p + (-step_size * exp_avg) / denom; the product first, as its kernel computes it.
      p.addcdiv_(exp_avg * g.neg_rate, denom);
    }
  }
}

}  // namespace baton::optim
