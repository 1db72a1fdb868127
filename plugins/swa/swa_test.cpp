#include "baton_test.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "algorithm_test_support.h"
#include "loopback_ranks.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace swa_test {

using namespace algorithm_test;

namespace {

constexpr double kPi = 3.14159265358979323846;

// Linear(4, 3) -> BatchNorm1d(3) -> Linear(3, 2): the batch-norm layer sees the first layer's outputs, so its
// statistics depend on the averaged weights.
struct NormedNetImpl : torch::nn::Module {
  NormedNetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(4, 3))),
        bn(register_module("bn", torch::nn::BatchNorm1d(3))),
        fc2(register_module("fc2", torch::nn::Linear(3, 2))) {}
  at::Tensor forward(const at::Tensor& x) { return fc2->forward(bn->forward(fc1->forward(x))); }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(NormedNet);

// 12 rows of 4 features in two classes, in batches of 4 taken in order: 3 batches per epoch.
std::shared_ptr<baton::TensorDataset> twelve_rows() {
  auto data = std::make_shared<baton::TensorDataset>();
  data->inputs = at::arange(48, at::kFloat).reshape({12, 4}).mul(0.37).sin().mul(2.0);
  data->targets = at::arange(12, at::kLong).remainder(2);
  return data;
}

struct Run {
  NormedNet net;
  std::unique_ptr<baton::Trainer> trainer;
  baton::LoadedPlugin swa;
};

// `communicator`: one of 2 ranks, each with batches of 2 (the same global batch of 4).
Run normed_run(const std::string& toml, Time duration, double lr = 0.1,
               std::shared_ptr<baton::Communicator> communicator = nullptr) {
  Run r;
  at::manual_seed(3);
  r.net = NormedNet();
  auto options = quiet_options();
  options.communicator = communicator;
  options.batch_size = communicator ? 2 : 4;
  options.shuffle = false;
  options.max_duration = duration;
  auto optimizer = std::make_shared<torch::optim::SGD>(r.net->parameters(), torch::optim::SGDOptions(lr));
  r.trainer = std::make_unique<baton::Trainer>(r.net, optimizer, twelve_rows(),
                                               std::make_shared<baton::TensorDataset>(), options);
  r.swa = load(toml, "swa");
  return r;
}

// Sets every parameter to known values at each batch_end (before the swa plugin's, being added first): element j
// of parameter i at batch b is 0.5 sin(0.37 j + 1.1 i + 0.53 b). Records what it set.
struct ForceWeights : baton::Algorithm {
  std::map<std::int64_t, Weights> at_batch;
  bool match(Event e, const baton::State&) override { return e == Event::batch_end; }
  void apply(Event, baton::State& s, baton::Logger&) override {
    c10::NoGradGuard no_grad;
    const auto b = static_cast<double>(s.timestamp().batch);
    double i = 0;
    for (const auto& item : s.facts.model()->named_parameters(true)) {
      at::Tensor p = item.value();
      p.copy_(at::arange(p.numel(), at::kDouble).mul(0.37).add(1.1 * i + 0.53 * b).sin().mul(0.5).reshape(p.sizes()));
      at_batch[s.timestamp().batch][item.key()] = p.detach().clone();
      i += 1;
    }
  }
};

// Records the model's parameters and buffers after every plugin's batch_end (a callback runs after algorithms).
struct Probe : baton::Callback {
  std::map<std::int64_t, Weights> at_batch;
  std::map<std::int64_t, double> lr_of_batch;  // the rate batch b (1-based) stepped with
  void batch_end(baton::State& s, baton::Logger&) override { at_batch[s.timestamp().batch] = copy_state(*s.facts.model()); }
  void after_train_batch(baton::State& s, baton::Logger&) override {
    lr_of_batch[s.timestamp().batch + 1] = s.facts.optimizer()->param_groups().front().options().get_lr();
  }
};

// The mean of the forced weights at `batches`, in double.
Weights mean_of(const std::map<std::int64_t, Weights>& forced, const std::vector<std::int64_t>& batches) {
  Weights sum;
  for (std::int64_t b : batches)
    for (const auto& [name, w] : forced.at(b))
      sum[name] = sum.count(name) ? sum[name] + w.to(at::kDouble) : w.to(at::kDouble);
  for (auto& [name, t] : sum) t = t / static_cast<double>(batches.size());
  return sum;
}

// Largest |actual - expected| over the tensors of `expected`.
double max_difference(const Weights& actual, const Weights& expected) {
  double worst = 0;
  for (const auto& [name, want] : expected) {
    auto it = actual.find(name);
    if (it == actual.end()) return INFINITY;
    worst = std::max(worst, (it->second.to(at::kDouble) - want).abs().max().item<double>());
  }
  return worst;
}

Weights average_of(const baton::Plugin& plugin) {
  baton::StateDict state;
  plugin.state_dict(state);
  Weights out;
  for (const auto& key : state.tensor_keys())
    if (key.rfind("average/", 0) == 0) out[key.substr(8)] = state.tensor(key);
  return out;
}

struct Forced {
  Run run;
  std::shared_ptr<ForceWeights> force = std::make_shared<ForceWeights>();
  std::shared_ptr<Probe> probe = std::make_shared<Probe>();
};

std::unique_ptr<Forced> forced_run(const std::string& toml, Time duration,
                                   std::shared_ptr<baton::Communicator> communicator = nullptr) {
  auto f = std::make_unique<Forced>();
  f->run = normed_run(toml, duration, 0.1, communicator);
  f->run.trainer->add_plugin("force", f->force);
  f->run.trainer->add_plugin("swa", f->run.swa.plugin);
  f->run.trainer->add_plugin("probe", f->probe);
  f->run.trainer->fit();
  return f;
}

// By hand: per batch of 4 rows in order, the mean and unbiased variance of each of fc1's 3 outputs under `weights`;
// the statistics are their means over the 3 batches (PyTorch's update_bn: cumulative averages).
std::pair<std::vector<double>, std::vector<double>> hand_statistics(const Weights& weights) {
  const Rows w = rows_of(weights.at("fc1.weight"));  // [3][4]
  const std::vector<double> bias = values_of(weights.at("fc1.bias"));
  const Rows x = rows_of(twelve_rows()->inputs);
  std::vector<double> mean(3, 0.0), var(3, 0.0);
  for (int batch = 0; batch < 3; ++batch)
    for (int k = 0; k < 3; ++k) {
      std::vector<double> h;
      for (int r = 4 * batch; r < 4 * batch + 4; ++r) {
        double v = bias[k];
        for (int j = 0; j < 4; ++j) v += w[k][j] * x[r][j];
        h.push_back(v);
      }
      double m = 0;
      for (double v : h) m += v / 4.0;
      double s = 0;
      for (double v : h) s += (v - m) * (v - m) / 3.0;
      mean[k] += m / 3.0;
      var[k] += s / 3.0;
    }
  return {mean, var};
}

bool warned(const baton::Trainer& trainer, const std::string& part) {
  for (const auto& w : trainer.warnings())
    if (contains(w, part)) return true;
  return false;
}

}  // namespace

TEST_SUITE("swa_plugin") {
  TEST_CASE("the average is the mean of the forced weight trajectory, and the model takes it at swa_end") {
    // Updates at the batch_end of batches 2, 3, 4 and 5; swa_end (5ba) is reached at the last of them.
    auto f = forced_run("swa_start = \"2ba\"\nswa_end = \"5ba\"\nupdate_interval = \"1ba\"", Time(6, TimeUnit::batch));
    const Weights expected = mean_of(f->force->at_batch, {2, 3, 4, 5});
    CHECK(max_difference(average_of(*f->run.swa.plugin), expected) < 1e-6);
    CHECK(max_difference(f->probe->at_batch.at(5), expected) < 1e-6);
    // One batch more or less is told apart, and before swa_end the model keeps its own (forced) weights.
    CHECK(max_difference(f->probe->at_batch.at(5), mean_of(f->force->at_batch, {3, 4, 5})) > 1e-3);
    CHECK(max_difference(f->probe->at_batch.at(4), f->force->at_batch.at(4)) == 0);
    baton::StateDict state;
    f->run.swa.plugin->state_dict(state);
    CHECK(state.get_int("updates") == 4);
    CHECK(state.get_bool("completed"));
  }

  TEST_CASE("updates every epoch from a fraction of the run, ending at the default swa_end") {
    // 4 epochs of 3 batches: epochs end at 0.25, 0.5, 0.75 and 1 of the run, so from 0.4dur the updates are at the
    // ends of epochs 2, 3 and 4 (after batches 6, 9, 12), and the last one reaches swa_end = 0.97dur.
    auto f = forced_run("swa_start = \"0.4dur\"", Time(4, TimeUnit::epoch));
    const Weights expected = mean_of(f->force->at_batch, {6, 9, 12});
    CHECK(max_difference(copy_state(f->run.trainer->model()), expected) < 1e-6);
    CHECK(max_difference(copy_state(f->run.trainer->model()), mean_of(f->force->at_batch, {3, 6, 9, 12})) > 1e-3);
  }

  TEST_CASE("batch-norm statistics after swa_end are a pass of the averaged model over the training data") {
    auto f = forced_run("swa_start = \"2ba\"\nswa_end = \"5ba\"\nupdate_interval = \"1ba\"", Time(6, TimeUnit::batch));
    const auto [mean, var] = hand_statistics(mean_of(f->force->at_batch, {2, 3, 4, 5}));
    const Weights& after = f->probe->at_batch.at(5);
    CHECK(max_abs_difference(values_of(after.at("bn.running_mean")), mean) < 1e-5);
    CHECK(max_abs_difference(values_of(after.at("bn.running_var")), var) < 1e-5);
    CHECK(after.at("bn.num_batches_tracked").item<std::int64_t>() == 3);  // one pass of 3 batches from reset
    // The statistics training left a batch earlier are not those: the pass is what set them.
    CHECK(max_abs_difference(values_of(f->probe->at_batch.at(4).at("bn.running_mean")), mean) > 1e-3);
    // The pass leaves the momentum as it was: the next training batch blends with 0.1 again (batch 6's step).
    CHECK(f->run.net->bn->options.momentum().value() == doctest::Approx(0.1));
  }

  TEST_CASE("on 2 Gloo ranks the statistics are averaged across ranks: the mean over all the training data") {
    // Each rank passes over its own 6 rows (3 batches of 2); the means of equal-sized batches averaged over both
    // ranks are the mean over all 12 rows, the 1-rank hand value. (The variances are of other batches, so only
    // agreement across ranks is checked for them.)
    const std::string toml = "swa_start = \"2ba\"\nswa_end = \"5ba\"\nupdate_interval = \"1ba\"";
    std::vector<Weights> at_end(2);
    std::vector<double> mean;
    baton::test::run_ranks(2, [&](std::shared_ptr<baton::Communicator> comm) {
      auto f = forced_run(toml, Time(6, TimeUnit::batch), comm);
      at_end[static_cast<std::size_t>(comm->rank())] = f->probe->at_batch.at(5);
      if (comm->rank() == 0) mean = hand_statistics(mean_of(f->force->at_batch, {2, 3, 4, 5})).first;
    });
    CHECK(max_abs_difference(values_of(at_end[0].at("bn.running_mean")), mean) < 1e-5);
    CHECK(bitwise_equal(at_end[0], at_end[1]));
  }

  TEST_CASE("the learning rate during SWA anneals to swa_lr as PyTorch's SWALR, then stays") {
    for (const std::string strategy : {"linear", "cos"}) {
      CAPTURE(strategy);
      auto r = normed_run("swa_start = \"2ba\"\nswa_end = \"7ba\"\nupdate_interval = \"1ba\"\nschedule_swa_lr = true\n"
                          "swa_lr = 0.01\nanneal_steps = 3\nanneal_strategy = \"" + strategy + "\"",
                          Time(8, TimeUnit::batch), 0.1);
      auto probe = std::make_shared<Probe>();
      r.trainer->add_plugin("swa", r.swa.plugin);
      r.trainer->add_plugin("probe", probe);
      r.trainer->fit();
      // Updates at the ends of batches 2..7, so batch b >= 3 steps after k = b - 2 of them; lr0 = 0.1.
      for (std::int64_t b = 1; b <= 8; ++b) {
        CAPTURE(b);
        const double k = std::max<double>(0, static_cast<double>(b) - 2);
        const double t = std::min(1.0, k / 3.0);
        const double a = strategy == "cos" ? (1 - std::cos(kPi * t)) / 2 : t;
        CHECK(probe->lr_of_batch.at(b) == doctest::Approx(0.01 * a + 0.1 * (1 - a)).epsilon(1e-12));
      }
      CHECK(probe->lr_of_batch.at(4) != doctest::Approx(0.1));
    }
  }

  TEST_CASE("a run stopped and resumed ends bitwise identical to an uninterrupted one, SWA included") {
    auto dir = baton::test::scratch_dir("swa-resume");
    // 9 batches; updates every batch from batch 3 (0.3dur), the model takes the average at batch 8 (0.8dur) and
    // trains one more batch; the rate anneals meanwhile.
    const std::string toml = "swa_start = \"0.3dur\"\nswa_end = \"0.8dur\"\nupdate_interval = \"1ba\"\n"
                             "schedule_swa_lr = true\nswa_lr = 0.02\nanneal_steps = 4\nanneal_strategy = \"cos\"";
    auto options = [&](const std::string& name) {
      auto o = quiet_options((dir / name).string());
      o.max_duration = Time(3, TimeUnit::epoch);
      o.save_interval = Time(1, TimeUnit::batch);
      return o;
    };
    auto train = [&](baton::TrainerOptions o, std::shared_ptr<baton::Plugin> extra) {
      auto trainer = make_trainer(std::move(o));
      auto swa = load(toml, "swa");
      trainer->add_plugin("swa", swa.plugin);
      if (extra) trainer->add_plugin("extra", extra);
      auto result = trainer->fit();
      return std::make_tuple(std::move(trainer), std::move(swa), result);
    };
    auto [whole, whole_swa, whole_result] = train(options("whole"), nullptr);
    struct StopAt : baton::Callback {
      void batch_end(baton::State& s, baton::Logger&) override {
        if (s.timestamp().batch == 5) s.request_stop("pause");
      }
    };
    auto [first, first_swa, first_result] = train(options("split"), std::make_shared<StopAt>());
    CHECK(first_result.end.batch == 5);
    auto resumed_options = options("split");
    resumed_options.resume = "auto";
    auto [resumed, resumed_swa, resumed_result] = train(resumed_options, nullptr);
    CHECK(resumed_result.end.batch == 9);
    CHECK(bitwise_equal(copy_state(resumed->model()), copy_state(whole->model())));
    CHECK(bitwise_equal(average_of(*resumed_swa.plugin), average_of(*whole_swa.plugin)));
    baton::StateDict a, b;
    whole_swa.plugin->state_dict(a);
    resumed_swa.plugin->state_dict(b);
    CHECK(a.get_int("updates") == 6);  // batches 3..8
    CHECK(b.get_int("updates") == 6);
    CHECK(b.get_bool("completed"));
    CHECK(resumed_result.evals.back().metrics.at("eval/loss") == whole_result.evals.back().metrics.at("eval/loss"));
  }

  TEST_CASE("swa beside a plugin keeping an average of its own is a warning; a window out of order is an error") {
    // Told by the weight sets the other plugin declares, whatever its id: "raw" alone is no average.
    struct KeepsSets : baton::Callback {
      std::vector<std::string> sets;
      void declare(baton::Declarations& run) const override {
        for (const auto& set : sets) run.weight_set(set);
      }
    };
    auto averaging = std::make_shared<KeepsSets>();
    averaging->sets = {"average", "raw"};
    auto r = normed_run("swa_start = \"1ep\"\nswa_end = \"2ep\"", Time(2, TimeUnit::epoch));
    r.trainer->add_plugin("swa", r.swa.plugin);
    r.trainer->add_plugin("averager", averaging);
    r.trainer->fit();
    CHECK(warned(*r.trainer, "keeps the 'average' weight set"));
    CHECK(warned(*r.trainer, "do not compose"));
    auto raw_only = std::make_shared<KeepsSets>();
    raw_only->sets = {"raw"};
    auto quiet = normed_run("swa_start = \"1ep\"\nswa_end = \"2ep\"", Time(2, TimeUnit::epoch));
    quiet.trainer->add_plugin("swa", quiet.swa.plugin);
    quiet.trainer->add_plugin("ema", raw_only);
    quiet.trainer->fit();
    CHECK_FALSE(warned(*quiet.trainer, "do not compose"));
    // swa_end's unit must be swa_start's, and it must come after it.
    CHECK(contains(config_error("swa_start = \"2ep\"\nswa_end = \"0.9dur\"", "swa"), "swa_end"));
    CHECK(contains(config_error("swa_start = \"0.8dur\"\nswa_end = \"0.5dur\"", "swa"), "must come after"));
    CHECK(contains(config_error("anneal_strategy = \"step\"", "swa"), "anneal_strategy"));
    CHECK(contains(config_error("update_interval = \"0ba\"", "swa"), "update_interval"));
  }
}

}  // namespace swa_test
