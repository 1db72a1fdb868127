// optimizer_monitor on a one-layer model whose weights and gradients are set by hand: every norm against the value
// worked out on paper; the names declared at init; the interval and per_layer keys; a real run's metrics.jsonl.
#include "baton_test.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "baton/builtin_datasets.h"
#include "baton/models.h"
#include "baton/trainer.h"
#include "monitor_test_support.h"
#include "plugin_files.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace optimizer_monitor_test {

using namespace monitor_test;

namespace {

// y = w·x + b with w = [3, 4], b = [12] and gradients g_w = [6, 8] (norm 10), g_b = [24]: the global gradient
// norm is sqrt(10² + 24²) = 26. SGD at lr 0.25 moves w by [1.5, 2] (norm 2.5) and b by 6: the global update norm
// is sqrt(2.5² + 6²) = 6.5, and the weights after it are w = [1.5, 2] (norm 2.5), b = [6], globally 6.5 again.
struct Fixture {
  torch::nn::Linear layer{torch::nn::LinearOptions(2, 1)};
  std::unique_ptr<torch::optim::SGD> sgd;
  baton::State state;
  RecordingLogger logger{&state};

  Fixture() {
    torch::NoGradGuard no_grad;
    layer->weight.copy_(torch::tensor({{3.0f, 4.0f}}));
    layer->bias.copy_(torch::tensor({12.0f}));
    sgd = std::make_unique<torch::optim::SGD>(layer->parameters(), torch::optim::SGDOptions(0.25));
    state.facts.set_model(layer.ptr().get());
    state.facts.set_optimizers({{"optimizer", sgd.get()}});
  }
  void set_gradients() {
    layer->weight.mutable_grad() = torch::tensor({{6.0f, 8.0f}});
    layer->bias.mutable_grad() = torch::tensor({24.0f});
  }
  // One training step as the trainer runs it: after_train_batch, the optimizer's step, the count, batch_end.
  void step(baton::Callback& monitor) {
    set_gradients();
    monitor.run_event(baton::Event::after_train_batch, state, logger);
    sgd->step();
    state.progress.now.batch += 1;
    monitor.run_event(baton::Event::batch_end, state, logger);
  }
};

}  // namespace

TEST_SUITE("optimizer_monitor") {
  TEST_CASE("gradient, weight and update norms of a hand-made step, per parameter and global") {
    Fixture f;
    auto plugin = load_plugin(baton::test::plugin_file("optimizer_monitor"), "optimizer_monitor", "");
    REQUIRE(plugin.callback != nullptr);
    // Declared before the model is built: the global norms by name, the per-layer ones as families.
    baton::Declarations run;
    plugin.callback->declare(run);
    CHECK(run.metrics() == std::vector<std::string>{"l2_norm/grad/global", "l2_norm/param/global",
                                                    "l2_norm/update/global"});
    f.state.facts.set_metrics(run.metrics(), run.directions(), run.metric_families());
    for (const char* name : {"l2_norm/grad/global", "l2_norm/grad/weight", "l2_norm/grad/bias", "l2_norm/param/global",
                             "l2_norm/param/weight", "l2_norm/param/bias", "l2_norm/update/global",
                             "l2_norm/update/weight", "l2_norm/update/bias"})
      CHECK_MESSAGE(f.state.facts.logs(name), name);
    plugin.callback->run_event(baton::Event::init, f.state, f.logger);


    f.step(*plugin.callback);
    CHECK(f.logger.last("l2_norm/grad/weight") == doctest::Approx(10.0));
    CHECK(f.logger.last("l2_norm/grad/bias") == doctest::Approx(24.0));
    CHECK(f.logger.last("l2_norm/grad/global") == doctest::Approx(26.0));
    CHECK(f.logger.last("l2_norm/update/weight") == doctest::Approx(2.5));
    CHECK(f.logger.last("l2_norm/update/bias") == doctest::Approx(6.0));
    CHECK(f.logger.last("l2_norm/update/global") == doctest::Approx(6.5));
    CHECK(f.logger.last("l2_norm/param/weight") == doctest::Approx(2.5));
    CHECK(f.logger.last("l2_norm/param/bias") == doctest::Approx(6.0));
    CHECK(f.logger.last("l2_norm/param/global") == doctest::Approx(6.5));
    CHECK(f.logger.metrics.size() == 9);
  }

  TEST_CASE("a step skipped by the optimizer (no step between the events) is an update of zero") {
    Fixture f;
    auto plugin = load_plugin(baton::test::plugin_file("optimizer_monitor"), "optimizer_monitor", "per_layer = false");
    baton::Declarations run;
    plugin.callback->declare(run);
    CHECK(run.metrics().size() == 3);
    CHECK(run.metric_families().empty());
    plugin.callback->run_event(baton::Event::init, f.state, f.logger);
    f.set_gradients();
    plugin.callback->run_event(baton::Event::after_train_batch, f.state, f.logger);
    f.state.progress.now.batch += 1;
    plugin.callback->run_event(baton::Event::batch_end, f.state, f.logger);
    CHECK(f.logger.last("l2_norm/update/global") == 0.0);
    CHECK(f.logger.last("l2_norm/param/global") == doctest::Approx(13.0));  // sqrt(3² + 4² + 12²)
    CHECK(f.logger.last("l2_norm/grad/global") == doctest::Approx(26.0));
    CHECK_FALSE(f.logger.logged("l2_norm/grad/weight"));
  }

  TEST_CASE("interval = 2 measures every second batch, in that batch's line") {
    Fixture f;
    auto plugin = load_plugin(baton::test::plugin_file("optimizer_monitor"), "optimizer_monitor", "interval = 2");
    plugin.callback->run_event(baton::Event::init, f.state, f.logger);
    f.step(*plugin.callback);
    CHECK(f.logger.metrics.empty());
    f.step(*plugin.callback);
    CHECK(f.logger.metrics.size() == 9);
    CHECK(config_error(baton::test::plugin_file("optimizer_monitor"), "optimizer_monitor", "interval = 0").find("interval") != std::string::npos);
    CHECK(config_error(baton::test::plugin_file("optimizer_monitor"), "optimizer_monitor", "per_layer = 1").find("per_layer") != std::string::npos);
  }

  TEST_CASE("a real run logs every norm at every batch, the update matching the weights' change") {
    auto dir = baton::test::scratch_dir("optimizer-monitor");
    baton::TrainerOptions options;
    options.batch_size = 32;
    options.max_duration = baton::Time(3, baton::TimeUnit::batch);
    options.eval_interval = baton::Time(0, baton::TimeUnit::epoch);
    options.save_interval = baton::Time(0, baton::TimeUnit::epoch);
    options.quiet = true;
    options.progress = false;
    options.run_dir = dir.string();
    options.precision = baton::Precision::fp32;  // float32 expectations, whatever the CPU computes natively
    at::manual_seed(5);
    baton::ModelSpec spec;
    spec.name = "mlp";
    spec.widths = {4};
    auto model = baton::make_model(spec);
    auto optimizer = std::make_shared<torch::optim::SGD>(model.ptr()->parameters(), torch::optim::SGDOptions(0.1));
    baton::Trainer trainer(model, optimizer, baton::make_synthetic_dataset(96, 7),
                           baton::make_synthetic_dataset(50, 8), options);
    trainer.add_plugin("optimizer_monitor", load_plugin(baton::test::plugin_file("optimizer_monitor"), "optimizer_monitor", "").plugin);
    trainer.fit();
    std::ifstream in(dir / "metrics.jsonl");
    int lines = 0;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (!j.contains("l2_norm/grad/global")) continue;
      ++lines;
      // Plain SGD: the update is lr times the gradient, parameter by parameter and globally.
      CHECK(j["l2_norm/update/global"].get<double>() ==
            doctest::Approx(0.1 * j["l2_norm/grad/global"].get<double>()).epsilon(1e-5));
      double squares = 0;
      for (const auto& [key, value] : j.items())
        if (key.rfind("l2_norm/grad/", 0) == 0 && key != "l2_norm/grad/global")
          squares += value.get<double>() * value.get<double>();
      CHECK(std::sqrt(squares) == doctest::Approx(j["l2_norm/grad/global"].get<double>()));
    }
    CHECK(lines == 3);
  }
}

}  // namespace optimizer_monitor_test
