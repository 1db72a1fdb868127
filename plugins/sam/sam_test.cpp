#include "baton_test.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ops/tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "algorithm_test_support.h"
#include "loopback_ranks.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace sam_test {

using namespace algorithm_test;

namespace {

// Linear least squares, L(w) = 1/4 sum_i (x_i . w - y_i)^2 over 4 rows of 2 features, on a linear model without
// bias: its gradient is written out by hand below.
const std::vector<std::vector<double>> kX = {{1, 2}, {3, -1}, {0.5, 1}, {-2, 1}};
const std::vector<double> kY = {1, 0, 2, -1};
const std::vector<double> kW0 = {0.3, -0.2};

// The gradient at w, the targets multiplied by y_scale.
std::vector<double> gradient(const std::vector<double>& w, double y_scale = 1) {
  std::vector<double> g(2, 0.0);
  for (std::size_t i = 0; i < kX.size(); ++i) {
    const double r = kX[i][0] * w[0] + kX[i][1] * w[1] - y_scale * kY[i];
    for (int j = 0; j < 2; ++j) g[j] += 2.0 * r * kX[i][j] / static_cast<double>(kX.size());
  }
  return g;
}

// One SAM step by hand: the gradient at w + rho g / (||g|| + eps), then SGD with it.
std::vector<double> sam_step(const std::vector<double>& w, double rho, double lr, double y_scale = 1) {
  const std::vector<double> g = gradient(w, y_scale);
  const double norm = std::sqrt(g[0] * g[0] + g[1] * g[1]);
  const std::vector<double> ascended = {w[0] + rho * g[0] / (norm + 1e-12), w[1] + rho * g[1] / (norm + 1e-12)};
  const std::vector<double> g2 = gradient(ascended, y_scale);
  return {w[0] - lr * g2[0], w[1] - lr * g2[1]};
}

std::vector<double> sgd_step(const std::vector<double>& w, double lr) {
  const std::vector<double> g = gradient(w);
  return {w[0] - lr * g[0], w[1] - lr * g[1]};
}

// Counts the model's forward passes and the before_forward events per batch (1-based).
struct PassCounter : baton::Callback {
  std::map<std::int64_t, int> before_forward_at;
  void before_forward(baton::State& s, baton::Logger&) override { ++before_forward_at[s.timestamp().batch + 1]; }
};

struct LeastSquares {
  torch::nn::Linear linear{torch::nn::LinearOptions(2, 1).bias(false)};
  std::shared_ptr<int> forwards = std::make_shared<int>(0);
  std::shared_ptr<PassCounter> counter = std::make_shared<PassCounter>();
  std::unique_ptr<baton::Trainer> trainer;
  baton::LoadedPlugin sam;
};

// The least-squares rows (repeated `copies` times: one batch each) trained with SGD at lr 0.1 and the sam plugin.
// Doubles the targets at before_forward, without putting them back: a pass that started from State's batch as the
// first pass left it would see them doubled twice.
struct DoubleTargets : baton::Callback {
  void before_forward(baton::State& s, baton::Logger&) override { s.batch["targets"] = s.batch["targets"] * 2; }
};

std::unique_ptr<LeastSquares> least_squares(const std::string& toml, baton::TrainerOptions options, int copies = 1,
                                            std::shared_ptr<baton::Plugin> extra = nullptr) {
  auto r = std::make_unique<LeastSquares>();
  {
    c10::NoGradGuard no_grad;
    r->linear->weight.copy_(at::tensor(kW0, at::kDouble).to(at::kFloat).reshape({1, 2}));
  }
  std::vector<double> x, y;
  for (int c = 0; c < copies; ++c)
    for (std::size_t i = 0; i < kX.size(); ++i) {
      x.insert(x.end(), kX[i].begin(), kX[i].end());
      y.push_back(kY[i]);
    }
  auto data = std::make_shared<baton::TensorDataset>();
  data->inputs = at::tensor(x, at::kDouble).to(at::kFloat).reshape({-1, 2});
  data->targets = at::tensor(y, at::kDouble).to(at::kFloat);
  options.batch_size = 4 / options.world_size;
  options.shuffle = false;
  options.max_duration = Time(copies, TimeUnit::batch);
  options.eval_interval = Time(0, TimeUnit::batch);  // nothing to evaluate, nowhere to save
  options.save_interval = Time(0, TimeUnit::batch);
  options.loss = [](const baton::Outputs& out, const baton::Batch& b) {
    return (out.main().squeeze(1) - b["targets"]).pow(2).mean();
  };
  auto linear = r->linear;
  auto forwards = r->forwards;
  baton::Model model(linear.ptr(), [linear, forwards](const at::Tensor& x) mutable {
    ++*forwards;
    return linear->forward(x);
  });
  auto optimizer = std::make_shared<torch::optim::SGD>(r->linear->parameters(), torch::optim::SGDOptions(0.1));
  r->trainer = std::make_unique<baton::Trainer>(model, optimizer, data, std::make_shared<baton::TensorDataset>(),
                                                std::move(options));
  r->sam = load(toml, "sam");
  r->trainer->add_plugin("sam", r->sam.plugin);
  r->trainer->add_plugin("counter", r->counter);
  if (extra) r->trainer->add_plugin("extra", extra);
  r->trainer->fit();
  return r;
}

std::vector<double> weights_of(const LeastSquares& r) { return values_of(r.linear->weight); }

}  // namespace

TEST_SUITE("sam_plugin") {
  TEST_CASE("one SAM step on linear least squares is the hand-computed update, with microbatches too") {
    const std::vector<double> expected = sam_step(kW0, 0.2, 0.1);
    // The plain step lands elsewhere: the check tells SAM from SGD.
    CHECK(max_abs_difference(sgd_step(kW0, 0.1), expected) > 1e-3);
    auto whole = least_squares("rho = 0.2", quiet_options());
    CHECK(max_abs_difference(weights_of(*whole), expected) < 1e-6);
    CHECK(*whole->forwards == 2);
    auto options = quiet_options();
    options.microbatch_size = 2;
    auto split = least_squares("rho = 0.2", options);
    CHECK(max_abs_difference(weights_of(*split), expected) < 1e-6);
    CHECK(*split->forwards == 4);  // two microbatches, twice
  }

  TEST_CASE("the second pass starts from the step's batch, not from what the first pass's events left on State") {
    auto r = least_squares("rho = 0.2", quiet_options(), 1, std::make_shared<DoubleTargets>());
    CHECK(max_abs_difference(weights_of(*r), sam_step(kW0, 0.2, 0.1, 2)) < 1e-6);
    // Targets doubled again in the second pass (the ascent from 2y, the gradient there from 4y) land elsewhere.
    const std::vector<double> g = gradient(kW0, 2);
    const double norm = std::sqrt(g[0] * g[0] + g[1] * g[1]);
    const std::vector<double> g4 = gradient({kW0[0] + 0.2 * g[0] / norm, kW0[1] + 0.2 * g[1] / norm}, 4);
    CHECK(max_abs_difference(weights_of(*r), {kW0[0] - 0.1 * g4[0], kW0[1] - 0.1 * g4[1]}) > 1e-3);
  }

  TEST_CASE("interval = 2 costs two forward and backward passes on every second step only") {
    auto r = least_squares("interval = 2", quiet_options(), 4);
    CHECK(r->counter->before_forward_at == std::map<std::int64_t, int>{{1, 1}, {2, 2}, {3, 1}, {4, 2}});
    CHECK(*r->forwards == 6);
    // Steps 1 and 3 are plain SGD, 2 and 4 SAM steps (rho = 0.05), each from where the last one left the weights.
    std::vector<double> w = kW0;
    for (int step = 1; step <= 4; ++step) w = step % 2 == 0 ? sam_step(w, 0.05, 0.1) : sgd_step(w, 0.1);
    CHECK(max_abs_difference(weights_of(*r), w) < 1e-6);
  }

  TEST_CASE("2 ranks (Gloo) at half the batch each take the hand-computed SAM step of the whole batch") {
    // The ascent uses the gradient averaged across ranks: each rank's own half would give another direction.
    const std::vector<double> expected = sam_step(kW0, 0.2, 0.1);
    std::vector<std::vector<double>> results(2);
    baton::test::run_ranks(2, [&](std::shared_ptr<baton::Communicator> comm) {
      auto options = quiet_options();
      options.communicator = comm;
      options.world_size = 2;
      auto r = least_squares("rho = 0.2", options);
      results[static_cast<std::size_t>(comm->rank())] = weights_of(*r);
    });
    CHECK(max_abs_difference(results[0], expected) < 1e-6);
    CHECK(max_abs_difference(results[1], expected) < 1e-6);
  }

  TEST_CASE("a model with its own training step cannot be stepped again: sam fails naming the reason") {
    torch::nn::Linear linear(torch::nn::LinearOptions(2, 1).bias(false));
    baton::Model model(linear);
    model.with_training_step([linear](const baton::Batch& b, baton::StepContext& step) mutable {
      const at::Tensor loss = (linear->forward(b["inputs"]).squeeze(1) - b["targets"]).pow(2).mean();
      step.backward(loss);
      step.step("optimizer");
      return loss;
    });
    auto data = std::make_shared<baton::TensorDataset>();
    data->inputs = at::tensor(std::vector<double>{1, 2, 3, -1, 0.5, 1, -2, 1}, at::kDouble).to(at::kFloat).view({4, 2});
    data->targets = at::tensor(kY, at::kDouble).to(at::kFloat);
    auto options = quiet_options();
    options.batch_size = 4;
    options.max_duration = Time(1, TimeUnit::batch);
    auto optimizer = std::make_shared<torch::optim::SGD>(linear->parameters(), torch::optim::SGDOptions(0.1));
    baton::Trainer trainer(model, optimizer, data, std::make_shared<baton::TensorDataset>(), options);
    auto sam = load("", "sam");
    trainer.add_plugin("sam", sam.plugin);
    std::string error;
    try {
      trainer.fit();
    } catch (const baton::Error& e) {
      error = e.what();
    }
    CHECK(contains(error, "plugin 'sam' failed on event after_train_batch"));
    CHECK(contains(error, "own training_step"));
  }

  TEST_CASE("keys are checked against Composer's ranges") {
    CHECK(contains(config_error("rho = 0", "sam"), "rho"));
    CHECK(contains(config_error("epsilon = -1", "sam"), "epsilon"));
    CHECK(contains(config_error("interval = 0", "sam"), "interval"));
  }
}

}  // namespace sam_test
