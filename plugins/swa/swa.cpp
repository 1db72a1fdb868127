// Stochastic weight averaging (Izmailov et al. 2018, https://arxiv.org/abs/1803.05407) as Composer's SWA
// algorithm, with its keys and defaults:
//
//   [[plugins]]
//   name = "swa"
//   swa_start = "0.7dur"         # dur, ep or ba: the first update point at or after it starts the average
//   swa_end = "0.97dur"          # the unit of swa_start: the first update point at or after it ends it
//   update_interval = "1ep"      # ep or ba: updates at each epoch_end / batch_end whose count is a multiple of it
//   schedule_swa_lr = false      # anneal the learning rate to swa_lr from the first update on
//   anneal_strategy = "linear"   # "linear" | "cos"
//   anneal_steps = 10            # updates over which the learning rate anneals
//   swa_lr = 0.05                # unset: the learning rate stays at its value at the first update
//
// The average is uniform: after n updates it is the mean of the n weights seen, kept as avg += (w - avg) / n. At
// swa_end the model takes the average and its batch-norm running statistics are recomputed by one pass over the
// training data (RunFacts::passes()->forward_training_data(), with cumulative averages as PyTorch's swa_utils.update_bn
// does), where Composer relies on the epochs left after swa_end to refresh them. The learning rate during SWA is
// PyTorch's SWALR after k updates: swa_lr * a + lr0 * (1 - a), a = f(min(1, k / anneal_steps)), with f(t) = t
// (linear) or (1 - cos(pi t)) / 2 (cos) and lr0 each parameter group's rate at the first update; it is set at
// before_train_batch, after the run's own schedule, so it wins over it.
#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ops/lerp.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/optim/optimizer.h>

#include "baton/plugin.h"

namespace {

using baton::Event;
using baton::Time;
using baton::TimeUnit;

constexpr double kPi = 3.14159265358979323846;

struct Settings {
  Time start;
  Time end;
  Time interval;
  bool schedule_lr = false;
  bool cosine = false;
  std::int64_t anneal_steps = 10;
  std::optional<double> swa_lr;
};

Settings read_settings(const baton::PluginConfig& config) {
  const std::vector<TimeUnit> window = {TimeUnit::duration, TimeUnit::epoch, TimeUnit::batch};
  Settings s;
  s.start = config.get_time_or("swa_start", Time(0.7, TimeUnit::duration), window);
  s.end = config.get_time_or("swa_end", Time(0.97, TimeUnit::duration), window);
  if (s.start.unit() != s.end.unit())
    config.fail("swa_end", "must be in the unit of swa_start (" + s.start.str() + "), got " + s.end.str());
  if (s.end.unit() == TimeUnit::duration && s.end.value() > 1)
    config.fail("swa_end", "a fraction of the run must be at most 1dur, got " + s.end.str());
  if (!(s.start < s.end))
    config.fail("swa_end", "must come after swa_start (" + s.start.str() + "), got " + s.end.str());
  s.interval = config.get_time_or("update_interval", Time(1, TimeUnit::epoch), {TimeUnit::epoch, TimeUnit::batch},
                                  baton::TimeZero::rejected);
  s.schedule_lr = config.get_or<bool>("schedule_swa_lr", false);
  s.cosine = config.get_choice_or("anneal_strategy", "linear", {"linear", "cos"}) == "cos";
  s.anneal_steps = config.get_int_or("anneal_steps", 10, baton::Range::at_least(1));
  if (config.has("swa_lr")) s.swa_lr = config.get_number("swa_lr", baton::Range::at_least(0));
  return s;
}

// The batch-norm layers of the model, whose running statistics the pass at swa_end recomputes.
std::vector<torch::nn::Module*> batch_norms(torch::nn::Module& model) {
  std::vector<torch::nn::Module*> out;
  for (const auto& m : model.modules(/*include_self=*/true))
    if (dynamic_cast<torch::nn::BatchNorm1dImpl*>(m.get()) || dynamic_cast<torch::nn::BatchNorm2dImpl*>(m.get()) ||
        dynamic_cast<torch::nn::BatchNorm3dImpl*>(m.get()))
      out.push_back(m.get());
  return out;
}

// BatchNorm{1,2,3}d share their options and reset through the same base; this reaches them for any of the three.
template <class Visit>
void visit_batch_norm(torch::nn::Module* m, Visit visit) {
  if (auto* b = dynamic_cast<torch::nn::BatchNorm1dImpl*>(m)) return visit(*b);
  if (auto* b = dynamic_cast<torch::nn::BatchNorm2dImpl*>(m)) return visit(*b);
  if (auto* b = dynamic_cast<torch::nn::BatchNorm3dImpl*>(m)) return visit(*b);
}

class Swa final : public baton::Algorithm {
 public:
  explicit Swa(const baton::PluginConfig& config) : s_(read_settings(config)) {}

  void subscribe(baton::Subscriptions& events) override {
    events.on(Event::init, this, &Swa::on_init);
    events.on(Event::fit_start, this, &Swa::on_fit_start);
    events.on(Event::after_load, this, &Swa::on_after_load);
    events.on(Event::before_train_batch, this, &Swa::on_before_train_batch);
    events.on(Event::batch_end, this, &Swa::on_batch_end);
    events.on(Event::epoch_end, this, &Swa::on_epoch_end);
    events.on(Event::fit_end, this, &Swa::on_fit_end);
  }
  void declare(baton::Declarations& run) const override {
    run.metric("swa/updates");
    // The shards would still hold the weights it replaced, and the next all-gather would undo the average.
    run.replicated_only("writes the averaged weights into the model during training (at swa_end)");
  }

  void state_dict(baton::StateDict& out) const override {
    out.set_int("updates", updates_);
    out.set_bool("completed", completed_);
    for (std::size_t i = 0; i < average_.size(); ++i) out.set_tensor("average/" + names_[i], average_[i]);
    for (std::size_t i = 0; i < lr0_.size(); ++i) out.set_double("lr0/" + std::to_string(i), lr0_[i]);
  }

  void load_state_dict(const baton::StateDict& in) override {
    // A checkpoint written without this plugin: the average starts at the next update point after swa_start.
    if (!in.has("updates")) return;
    updates_ = in.get_int("updates");
    completed_ = in.get_bool("completed");
    names_.clear();
    average_.clear();
    lr0_.clear();
    const std::string prefix = "average/";
    for (const auto& key : in.tensor_keys())
      if (key.rfind(prefix, 0) == 0) {
        names_.push_back(key.substr(prefix.size()));
        average_.push_back(in.tensor(key).clone());
      }
    for (std::size_t i = 0; in.has("lr0/" + std::to_string(i)); ++i)
      lr0_.push_back(in.get_double("lr0/" + std::to_string(i)));
  }

 private:
  bool update_point(Event event, const baton::Progress& progress) const {
    const std::int64_t every = s_.interval.count();
    if (event == Event::batch_end && s_.interval.unit() == TimeUnit::batch) return progress.now.batch % every == 0;
    if (event == Event::epoch_end && s_.interval.unit() == TimeUnit::epoch) return progress.now.epoch % every == 0;
    return false;
  }

  void on_init(baton::State& state, baton::Logger&) {
    if (state.facts.model() == nullptr) throw baton::Error("swa: State::model is null");
  }

  void on_fit_start(baton::State& state, baton::Logger& logger) {
    // A plugin that keeps weight sets of its own (an average it swaps in: the ema plugin's "ema") does not compose
    // with an average that replaces the weights at swa_end; its declared sets say so, whichever plugin it is.
    for (const auto& set : state.facts.weight_sets())
      if (set != "raw")
        logger.warn("swa: another plugin of the run keeps the '" + set + "' weight set (an average of its own, as " +
                    "the ema plugin does): SWA and such an average do not compose (Composer advises using one of " +
                    "them): it averages weights that SWA replaces at swa_end, and its evaluations and exports " +
                    "ignore the SWA average; remove one of the two");
    to_device(state);
  }

  void on_after_load(baton::State& state, baton::Logger&) { to_device(state); }
  void on_before_train_batch(baton::State& state, baton::Logger&) { apply_lr(state); }
  void on_batch_end(baton::State& state, baton::Logger& logger) { on_update_point(Event::batch_end, state, logger); }
  void on_epoch_end(baton::State& state, baton::Logger& logger) { on_update_point(Event::epoch_end, state, logger); }

  void on_update_point(Event event, baton::State& state, baton::Logger& logger) {
    if (completed_ || !update_point(event, state.progress)) return;
    update(state, logger);
    if (state.progress.reached(s_.end)) complete(state, logger);
  }

  void on_fit_end(baton::State&, baton::Logger& logger) {
    if (updates_ > 0 && !completed_)
      logger.warn("swa: the run ended before swa_end (" + s_.end.str() + "), so the model keeps its trained " +
                  "weights: the average of " + std::to_string(updates_) + " updates was not applied; set an " +
                  "earlier swa_end");
  }

  void to_device(baton::State& state) {
    const auto params = state.facts.model()->parameters();
    if (params.empty()) return;
    for (auto& a : average_) a = a.to(params.front().device());
  }

  // The parameters SWA averages (floating ones; an integer parameter does not train), by name.
  std::vector<std::pair<std::string, at::Tensor>> averaged(torch::nn::Module& model) const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& item : model.named_parameters(/*recurse=*/true))
      if (item.value().is_floating_point()) out.emplace_back(item.key(), item.value());
    return out;
  }

  void update(baton::State& state, baton::Logger& logger) {
    if (!state.progress.reached(s_.start)) return;
    c10::NoGradGuard no_grad;
    const auto params = averaged(*state.facts.model());
    if (updates_ == 0) {
      names_.clear();
      average_.clear();
      for (const auto& [name, p] : params) {
        names_.push_back(name);
        average_.push_back(p.detach().clone());
      }
      lr0_.clear();
      for (const auto& [name, optimizer] : state.facts.optimizers())
        for (auto& group : optimizer->param_groups()) lr0_.push_back(group.options().get_lr());
    } else {
      if (params.size() != average_.size())
        throw baton::Error("swa: the model has " + std::to_string(params.size()) + " parameters, the average " +
                           std::to_string(average_.size()));
      // The running mean of n + 1 samples: avg + (w - avg) / (n + 1).
      const double weight = 1.0 / static_cast<double>(updates_ + 1);
      for (std::size_t i = 0; i < average_.size(); ++i) average_[i].lerp_(params[i].second.detach(), weight);
    }
    ++updates_;
    logger.log_metric("swa/updates", static_cast<double>(updates_));
  }

  // swa_end: the model takes the average, then its batch-norm statistics are those of the average.
  void complete(baton::State& state, baton::Logger& logger) {
    completed_ = true;
    if (updates_ == 0) {
      logger.warn("swa: swa_end (" + s_.end.str() + ") came before any update point at or after swa_start (" +
                  s_.start.str() + "): nothing was averaged, the model keeps its weights");
      return;
    }
    {
      c10::NoGradGuard no_grad;
      const auto params = averaged(*state.facts.model());
      for (std::size_t i = 0; i < average_.size(); ++i) params[i].second.copy_(average_[i]);
    }
    const auto norms = batch_norms(*state.facts.model());
    if (!norms.empty()) {
      if (state.facts.passes() == nullptr)
        throw baton::Error("swa: batch-norm statistics need a pass over the training data, which this run cannot "
                           "give (no trainer runs it)");
      // Cumulative averages (momentum none) from reset statistics: the mean over the pass's batches.
      std::vector<c10::optional<double>> momenta;
      for (auto* m : norms)
        visit_batch_norm(m, [&](auto& bn) {
          momenta.push_back(bn.options.momentum());
          bn.options.momentum(c10::nullopt);
          bn.reset_running_stats();
        });
      std::exception_ptr failure;
      try {
        state.facts.passes()->forward_training_data();
      } catch (...) {
        failure = std::current_exception();
      }
      for (std::size_t i = 0; i < norms.size(); ++i)
        visit_batch_norm(norms[i], [&](auto& bn) { bn.options.momentum(momenta[i]); });
      if (failure) std::rethrow_exception(failure);
    }
    logger.info("swa: the model now holds the average of " + std::to_string(updates_) + " updates" +
                (norms.empty() ? std::string()
                               : ", its batch-norm statistics recomputed over the training data (" +
                                     std::to_string(norms.size()) + " layers)"));
  }

  // PyTorch's SWALR after `updates_` updates, from each group's rate at the first one.
  void apply_lr(baton::State& state) const {
    if (!s_.schedule_lr || updates_ == 0) return;
    const double t = std::min(1.0, static_cast<double>(updates_) / static_cast<double>(s_.anneal_steps));
    const double a = s_.cosine ? (1.0 - std::cos(kPi * t)) / 2.0 : t;
    std::size_t i = 0;
    for (const auto& [name, optimizer] : state.facts.optimizers())
      for (auto& group : optimizer->param_groups()) {
        if (i >= lr0_.size()) return;
        const double lr0 = lr0_[i++];
        group.options().set_lr(s_.swa_lr.value_or(lr0) * a + lr0 * (1.0 - a));
      }
  }

  Settings s_;
  std::int64_t updates_ = 0;  // the weights averaged so far
  bool completed_ = false;    // swa_end has passed: the model holds the average
  std::vector<std::string> names_;
  std::vector<at::Tensor> average_;
  std::vector<double> lr0_;  // every optimizer's param groups' rates at the first update, in RunFacts::optimizers() order
};

}  // namespace

BATON_PLUGIN(Swa, "swa", "1.0.0",
             "stochastic weight averaging: a uniform average of the weights from swa_start, with batch-norm "
             "statistics recomputed at swa_end")
