#include "baton_test.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <ATen/Context.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/inverse.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/optim/sgd.h>

#include "baton/components.h"
#include "baton/trainer.h"
#include "checkpoint/checkpoint_store.h"
#include "config/config.h"  // eval_set_name_problem
#include "baton/builtin_datasets.h"
#include "baton/models.h"
#include "baton/safetensors.h"
#include "small_trainer.h"

namespace fs = std::filesystem;
using baton::Time;
using baton::TimeUnit;
using baton::test::make_trainer;
using baton::test::quiet_options;

// Runs as a user writes them: what a run leaves on disk, the data's defaults, LibTorch's own modules, evaluation
// sets and configured metrics.
TEST_SUITE("trainer") {
  TEST_CASE("a run on the test device writes metrics.jsonl and model.safetensors") {
    auto dir = baton::test::scratch_dir("trainer-outputs");
    auto options = quiet_options(dir.string());
    options.max_duration = Time(1, TimeUnit::epoch);
    options.device = baton::test::test_device();
    MESSAGE("device " << options.device);
    auto result = make_trainer(options)->fit();
    CHECK(fs::exists(dir / "model.safetensors"));
    std::ifstream metrics(dir / "metrics.jsonl");
    std::string line, all;
    int lines = 0;
    while (std::getline(metrics, line)) {
      ++lines;
      all += line;
    }
    CHECK(lines >= 2);
    CHECK(all.find("\"eval/accuracy\"") != std::string::npos);
    CHECK(all.find("\"train/loss\"") != std::string::npos);
    REQUIRE(result.evals.size() == 1);
    CHECK(result.evals[0].metrics.count("eval/accuracy") == 1);
  }

  TEST_CASE("a regression trains with the data's defaults (mse, mae/rmse/r2) to the least-squares optimum") {
    // y = X w + b + noise with 3 features. A linear model (an mlp without hidden layers) trained with SGD should
    // reach the error of the least-squares fit, computed here in closed form (normal equations), not by baton.
    at::manual_seed(3);
    const std::int64_t n = 512, features = 3;
    baton::TensorDataset train, eval;
    const at::Tensor w = at::tensor({1.5, -2.0, 0.5}, at::kFloat).reshape({3, 1});
    auto make = [&](baton::TensorDataset& d, std::int64_t rows) {
      d.inputs = at::randn({rows, features});
      d.targets = (at::matmul(d.inputs, w) + 0.25 + 0.1 * at::randn({rows, 1})).reshape({rows});
    };
    make(train, n);
    make(eval, n);
    baton::ModelSpec spec;
    spec.name = "mlp";
    spec.widths = {};
    spec.input_shape = {features};
    spec.outputs = 1;
    auto model = baton::make_model(spec);
    auto optimizer = std::make_shared<torch::optim::SGD>(model.ptr()->parameters(),
                                                         torch::optim::SGDOptions(0.05).momentum(0.9));
    auto options = quiet_options();
    options.batch_size = 32;
    options.max_duration = Time(20, TimeUnit::epoch);
    options.eval_interval = Time(20, TimeUnit::epoch);
    baton::Trainer trainer(model, optimizer, train, eval, options);
    const auto result = trainer.fit();
    REQUIRE_FALSE(result.evals.empty());
    const auto& metrics = result.evals.back().metrics;
    REQUIRE(metrics.count("eval/mae") == 1);
    REQUIRE(metrics.count("eval/rmse") == 1);
    REQUIRE(metrics.count("eval/r2") == 1);
    CHECK(metrics.count("eval/accuracy") == 0);

    // Least squares on the training set, evaluated on the eval set.
    const at::Tensor x1 = at::cat({train.inputs, at::ones({n, 1})}, 1).to(at::kDouble);
    const at::Tensor y = train.targets.to(at::kDouble).reshape({n, 1});
    const at::Tensor beta = at::matmul(at::inverse(at::matmul(x1.t(), x1)), at::matmul(x1.t(), y));
    const at::Tensor e1 = at::cat({eval.inputs, at::ones({n, 1})}, 1).to(at::kDouble);
    const at::Tensor residual = at::matmul(e1, beta).reshape({n}) - eval.targets.to(at::kDouble);
    const double best_rmse = residual.pow(2).mean().sqrt().item<double>();
    const double best_mae = residual.abs().mean().item<double>();
    const at::Tensor centred = eval.targets.to(at::kDouble) - eval.targets.to(at::kDouble).mean();
    const double best_r2 = 1.0 - residual.pow(2).sum().item<double>() / centred.pow(2).sum().item<double>();
    CHECK(best_rmse == doctest::Approx(0.1).epsilon(0.15));  // the noise level
    CHECK(metrics.at("eval/rmse") == doctest::Approx(best_rmse).epsilon(0.05));
    CHECK(metrics.at("eval/mae") == doctest::Approx(best_mae).epsilon(0.05));
    CHECK(metrics.at("eval/r2") == doctest::Approx(best_r2).epsilon(0.002));
    // The loss is the mean squared error: rmse squared.
    CHECK(metrics.at("eval/loss") == doctest::Approx(metrics.at("eval/rmse") * metrics.at("eval/rmse")).epsilon(1e-4));
  }

  TEST_CASE("a torch::nn::Sequential trains as it is, its tensors under LibTorch's names") {
    // y = 2 x0 - x1 + 3 x2 through a small Sequential: training must bring the mse far below the targets'
    // variance (~14), the run's model.safetensors must hold exactly the Sequential's tensors by their index names,
    // with the trained values, and the evaluation must be the Sequential's own forward.
    at::manual_seed(4);
    baton::TensorDataset train, eval;
    const at::Tensor w = at::tensor({2.0, -1.0, 3.0}, at::kFloat).reshape({3, 1});
    for (auto* d : {&train, &eval}) {
      d->inputs = at::randn({256, 3});
      d->targets = at::matmul(d->inputs, w).reshape({256});
    }
    torch::nn::Sequential net(torch::nn::Linear(3, 16), torch::nn::Tanh(), torch::nn::Linear(16, 1));
    auto optimizer = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    auto dir = baton::test::scratch_dir("trainer-sequential");
    auto options = quiet_options(dir.string());
    options.max_duration = Time(30, TimeUnit::epoch);
    options.eval_interval = Time(30, TimeUnit::epoch);
    options.save_interval = Time(0, TimeUnit::epoch);
    baton::Trainer trainer(net, optimizer, train, eval, options);
    const auto result = trainer.fit();
    REQUIRE_FALSE(result.evals.empty());
    CHECK(result.evals.back().metrics.at("eval/loss") < 0.05);

    const auto saved = baton::read_safetensors((dir / "model.safetensors").string());
    std::vector<std::string> names;
    for (const auto& [name, tensor] : saved.tensors) names.push_back(name);
    CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
    const auto* last = net->named_parameters().find("2.weight");
    REQUIRE(last != nullptr);
    for (const auto& [name, tensor] : saved.tensors)
      if (name == "2.weight") CHECK(at::equal(tensor, last->detach()));

    at::NoGradGuard no_grad;
    net->eval();
    const double mse = (net->forward(eval.inputs).reshape({256}) - eval.targets).pow(2).mean().item<double>();
    // Batches of 50 against one of 256: the same sums in another order, equal to rounding.
    CHECK(result.evals.back().metrics.at("eval/loss") == doctest::Approx(mse).epsilon(1e-5));
  }

  TEST_CASE("an evaluation set's name follows the config's rule: no spaces, no '/', not \"eval\"") {
    auto data = std::make_shared<baton::TensorDataset>(baton::make_synthetic_dataset(32, 7));
    baton::ModelSpec spec;
    spec.name = "mlp";
    spec.widths = {8};
    auto model = baton::make_model(spec);
    for (const std::string name : {"my set", "a/b", "eval", ""}) {
      auto options = quiet_options();
      baton::EvalSet set;
      set.name = name;
      set.data = data;
      options.eval_sets = {set};
      auto optimizer = std::make_shared<torch::optim::SGD>(model.ptr()->parameters(), torch::optim::SGDOptions(0.1));
      std::string error;
      try {
        baton::Trainer trainer(model, optimizer, data, data, options);
      } catch (const baton::Error& e) {
        error = e.what();
      }
      CAPTURE(name);
      CHECK(error == "evaluation set \"" + name + "\": " + baton::eval_set_name_problem(name));
      CHECK_FALSE(baton::eval_set_name_problem(name).empty());
    }
    CHECK(baton::eval_set_name_problem("my_set").empty());
    CHECK(baton::eval_set_name_problem("my set") ==
          "expected a name without '/' or spaces (it is part of metric names), got \"my set\"");
  }

  TEST_CASE("an extra evaluation set runs at its own interval, under its name, with its own metrics") {
    // Main evaluation every 2 epochs, a "train" set (the training samples) every epoch with top_k (k = 2): epoch 1
    // has the set alone, epoch 2 both, in one record. Its values are checked against the model's own outputs.
    auto options = quiet_options();
    options.max_duration = Time(2, TimeUnit::epoch);
    options.eval_interval = Time(2, TimeUnit::epoch);
    auto train_data = std::make_shared<baton::TensorDataset>(baton::make_synthetic_dataset(96, 7));
    const auto* top_k = baton::components().metrics.find("top_k");
    REQUIRE(top_k != nullptr);
    baton::EvalSet set;
    set.name = "train";
    set.data = train_data;
    set.metrics = {{"top_k", top_k->factory(baton::PluginConfig::from_toml("k = 2"), train_data->spec())}};
    set.interval = Time(1, TimeUnit::epoch);
    options.eval_sets = {set};
    at::manual_seed(5);
    baton::ModelSpec spec;
    spec.name = "mlp";
    spec.widths = {16};
    auto model = baton::make_model(spec);
    auto make = [&] {
      auto optimizer = std::make_shared<torch::optim::SGD>(model.ptr()->parameters(), torch::optim::SGDOptions(0.05));
      return std::make_unique<baton::Trainer>(model, optimizer, train_data,
                                              std::make_shared<baton::TensorDataset>(baton::make_synthetic_dataset(50, 8)),
                                              options);
    };
    const auto result = make()->fit();
    REQUIRE(result.evals.size() == 2);
    const auto& first = result.evals[0].metrics;
    CHECK(result.evals[0].at.epoch == 1);
    CHECK(first.count("eval/train/top_k") == 1);
    CHECK(first.count("eval/train/loss") == 1);
    CHECK(first.count("eval/accuracy") == 0);  // the main set is not due at epoch 1
    CHECK(first.count("eval/train/accuracy") == 0);
    const auto& last = result.evals[1].metrics;
    CHECK(last.count("eval/accuracy") == 1);
    CHECK(last.count("eval/train/top_k") == 1);

    // top-2 accuracy of the final weights on the training samples, from the model's own outputs.
    at::Tensor outputs;
    {
      at::NoGradGuard no_grad;
      model.ptr()->eval();
      outputs = model.forward(train_data->inputs);
    }
    const at::Tensor top2 = std::get<1>(outputs.topk(2, 1));
    const double expected =
        top2.eq(train_data->targets.unsqueeze(1)).any(1).to(at::kDouble).mean().item<double>();
    CHECK(last.at("eval/train/top_k") == doctest::Approx(expected).epsilon(1e-12));
    // The set's loss is the mean cross entropy over its samples.
    const double loss = at::cross_entropy_loss(outputs, train_data->targets).item<double>();
    CHECK(last.at("eval/train/loss") == doctest::Approx(loss).epsilon(1e-5));

    // A standalone evaluation (a trainer of its own, over the trained model) reports every set, the extra one named.
    const auto results = make()->evaluate_standalone();
    REQUIRE(results.size() == 2);
    CHECK(results[0].set.empty());
    CHECK(results[1].set == "train");
    CHECK(results[1].metric("top_k") == doctest::Approx(expected).epsilon(1e-12));
  }

  TEST_CASE("configured metrics replace the defaults and are logged per pass, in order") {
    auto options = quiet_options();
    options.max_duration = Time(1, TimeUnit::epoch);
    const baton::DataSpec spec = baton::make_synthetic_dataset(4, 1).spec();
    options.metrics = {{"top_k", baton::components().metrics.find("top_k")->factory(
                                     baton::PluginConfig::from_toml("k = 10", "top_k"), spec)},
                       {"accuracy", baton::components().metrics.find("accuracy")->factory(baton::PluginConfig(), spec)}};
    auto trainer = make_trainer(options);
    const auto results = trainer->evaluate_standalone();
    REQUIRE(results.size() == 1);
    REQUIRE(results[0].metrics.size() == 2);
    CHECK(results[0].metrics[0].name == "top_k");
    CHECK(results[0].metrics[0].value == 1.0);  // every class is among the top 10 of 10
    CHECK(results[0].metric("accuracy") >= 0);
    CHECK(results[0].metric("accuracy") <= 1);
    CHECK_THROWS_AS(results[0].metric("f1"), baton::Error);
  }

  // A batch that takes `seconds` of wall-clock time, counted.
  struct SlowBatches : baton::Callback {
    explicit SlowBatches(double s) : seconds(s) {}
    double seconds;
    int batches = 0;
    void batch_end(baton::State&, baton::Logger&) override {
      ++batches;
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    }
  };

  std::vector<std::string> checkpoint_names(const fs::path& dir) {
    std::vector<std::string> names;
    if (!fs::exists(dir / "checkpoints")) return names;
    for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
      if (fs::exists(e.path() / "meta.json")) names.push_back(e.path().filename().string());
    return names;
  }

  TEST_CASE("trainer.time_limit: the run saves and stops before the limit, without the final evaluation, and a "
            "resume continues it") {
    auto dir = baton::test::scratch_dir("trainer-time-limit");
    auto options = quiet_options(dir.string());
    options.max_duration = Time(1000, TimeUnit::epoch);  // far beyond what 4 s train
    options.eval_interval = Time(4, TimeUnit::epoch);
    options.time_limit = Time::parse("4s");
    auto trainer = make_trainer(options);
    auto slow = std::make_shared<SlowBatches>(0.1);
    trainer->add_plugin("slow", slow);
    const auto result = trainer->fit();
    CHECK(result.stop_cause == baton::StopCause::time_limit);
    CHECK(result.stop_reason.find("trainer.time_limit 4s") != std::string::npos);
    CHECK(result.seconds < 4.0);  // ended within the limit, its checkpoint written
    // And not long before it: batches of ~0.1 s, checkpoints of this small model timed at well under a second
    // from the first epoch's end on (before that, a guess of over half a second stands in for them).
    CHECK(result.seconds > 3.0);
    REQUIRE_FALSE(result.last_checkpoint.empty());
    const std::int64_t end = result.end.batch;
    CHECK(end == slow->batches);
    // The stop's checkpoint is at the batch it stopped after (ba<N>, or ep<N> at an epoch's end).
    const std::string stop_name = fs::path(result.last_checkpoint).filename().string();
    CHECK((stop_name == "ba" + std::to_string(end) || (end % 3 == 0 && stop_name == "ep" + std::to_string(end / 3))));
    // No evaluation at the stop unless one fell due there (every 4 epochs = 12 batches).
    for (const auto& e : result.evals) CHECK(e.at.batch % 12 == 0);

    auto more = quiet_options(dir.string());
    more.resume = "auto";
    more.max_duration = Time(static_cast<double>(end + 2), TimeUnit::batch);
    auto resumed = make_trainer(more);
    auto counter = std::make_shared<SlowBatches>(0.0);
    resumed->add_plugin("slow", counter);
    const auto rest = resumed->fit();
    CHECK(rest.stop_cause == baton::StopCause::none);
    CHECK(rest.end.batch == end + 2);
    CHECK(counter->batches == 2);  // continued from the stop, not started again
  }

  TEST_CASE("checkpoint.save_interval in wall-clock time saves after the first batch that ends that long after the "
            "last save") {
    auto dir = baton::test::scratch_dir("trainer-save-by-time");
    auto options = quiet_options(dir.string());
    options.max_duration = Time(8, TimeUnit::batch);
    options.eval_interval = Time(0, TimeUnit::epoch);
    options.save_interval = Time::parse("1s");
    auto trainer = make_trainer(options);
    trainer->add_plugin("slow", std::make_shared<SlowBatches>(0.3));
    const auto result = trainer->fit();
    CHECK(result.stop_cause == baton::StopCause::none);
    // ~0.3 s batches: the first save after batch 4 (1.2 s), the run's end at batch 8; epochs (3 batches) save nothing.
    const auto names = checkpoint_names(dir);
    CHECK(names.size() >= 2);
    CHECK(std::find(names.begin(), names.end(), "ba8") != names.end());
    bool before_end = false;
    for (const auto& n : names) {
      CHECK(n.rfind("ba", 0) == 0);
      if (n != "ba8") before_end = true;
    }
    CHECK(before_end);
    CHECK(std::find(names.begin(), names.end(), "ba1") == names.end());
  }

  TEST_CASE("issue 41: a model's optimizers are each saved under their name, and resume in any order") {
    // The mlp's weights stepped by SGD "a", its biases by another SGD "b" (no momentum, another lr): the trainer's
    // own step runs both.
    const auto model_of = [](bool reversed) {
      at::manual_seed(5);
      baton::ModelSpec spec;
      spec.name = "mlp";
      spec.widths = {16};
      baton::Model model = baton::make_model(spec);
      std::vector<at::Tensor> weights, biases;
      for (const auto& p : model.ptr()->named_parameters())
        (p.key().size() > 4 && p.key().substr(p.key().size() - 4) == "bias" ? biases : weights).push_back(p.value());
      baton::NamedOptimizer a{"a", std::make_shared<torch::optim::SGD>(weights, torch::optim::SGDOptions(0.05).momentum(0.9))};
      baton::NamedOptimizer b{"b", std::make_shared<torch::optim::SGD>(biases, torch::optim::SGDOptions(0.02).momentum(0.5))};
      model.with_optimizers(reversed ? std::vector<baton::NamedOptimizer>{b, a} : std::vector<baton::NamedOptimizer>{a, b});
      return model;
    };
    const auto run = [&](const fs::path& dir, int epochs, bool reversed, const std::string& resume) {
      baton::TrainerOptions o = baton::test::quiet_options(dir.string());
      o.max_duration = Time(epochs, TimeUnit::epoch);
      o.resume = resume;
      baton::Trainer trainer(model_of(reversed), nullptr,
                             std::make_shared<baton::TensorDataset>(baton::make_synthetic_dataset(96, 7)),
                             std::make_shared<baton::TensorDataset>(baton::make_synthetic_dataset(50, 8)), o);
      trainer.fit();
      return baton::test::copy_state(trainer.model());
    };
    const fs::path dir = baton::test::scratch_dir("named-optimizers");
    const auto straight = run(dir / "straight", 4, false, "");
    run(dir / "parted", 2, false, "");
    const std::string ep2 = (dir / "parted" / "checkpoints" / "ep2").string();
    baton::CheckpointData data = baton::load_checkpoint(ep2);
    CHECK(data.section("optimizer.a") != nullptr);
    CHECK(data.section("optimizer.b") != nullptr);
    CHECK(data.section("optimizer") == nullptr);
    // Given in the other order, each optimizer still finds its own state: bitwise the uninterrupted run.
    CHECK(baton::test::bitwise_equal(run(dir / "reordered", 4, true, ep2), straight));
    // A checkpoint written when the first optimizer was stored as plain "optimizer" resumes as before.
    for (auto& [name, section] : data.sections)
      if (name == "optimizer.a") name = "optimizer";
    const std::string old = baton::CheckpointStore((dir / "old").string(), 0).save("ep2", data);
    CHECK(baton::test::bitwise_equal(run(dir / "from-old", 4, false, old), straight));
    // A missing optimizer is an error naming it, not a fresh state.
    for (auto& [name, section] : data.sections)
      if (name == "optimizer.b") name = "optimizer.c";
    const std::string missing = baton::CheckpointStore((dir / "missing").string(), 0).save("ep2", data);
    CHECK_THROWS_WITH_AS(run(dir / "from-missing", 4, false, missing),
                         doctest::Contains("has no state for optimizer 'b' (section optimizer.b)"), baton::Error);
  }
}
