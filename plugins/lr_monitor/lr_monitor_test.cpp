// lr_monitor on a real trainer: every parameter group's lr, logged at batch_end into that batch's line.
#include "baton_test.h"

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/optim/sgd.h>

#include "baton/trainer.h"
#include "baton/builtin_datasets.h"
#include "baton/models.h"
#include "monitor_test_support.h"
#include "plugin_files.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace lr_monitor_test {

using namespace monitor_test;

TEST_SUITE("lr_monitor") {
  TEST_CASE("two parameter groups under a linear decay: lr/group0 and lr/group1 of each batch in metrics.jsonl") {
    auto dir = baton::test::scratch_dir("lr-monitor");
    baton::TrainerOptions options;
    options.batch_size = 32;  // 96 samples: 3 batches per epoch
    options.max_duration = baton::Time(2, baton::TimeUnit::epoch);
    options.eval_interval = baton::Time(0, baton::TimeUnit::epoch);
    options.save_interval = baton::Time(0, baton::TimeUnit::epoch);
    options.quiet = true;
    options.progress = false;
    options.run_dir = dir.string();
    options.precision = baton::Precision::fp32;  // float32 expectations, whatever the CPU computes natively
    // The factor applied before each batch: 1 - batch / 6, batch counting those before it.
    options.lr_schedule = [](const baton::Progress& p) { return 1.0 - static_cast<double>(p.now.batch) / 6.0; };

    at::manual_seed(5);
    baton::ModelSpec spec;
    spec.name = "mlp";
    spec.widths = {16};
    auto model = baton::make_model(spec);
    // The first layer's parameters at lr 0.1, the rest at 0.4.
    auto params = model.ptr()->parameters();
    std::vector<at::Tensor> first(params.begin(), params.begin() + 2), rest(params.begin() + 2, params.end());
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(first, std::make_unique<torch::optim::SGDOptions>(0.1));
    groups.emplace_back(rest, std::make_unique<torch::optim::SGDOptions>(0.4));
    auto optimizer = std::make_shared<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.1));
    baton::Trainer trainer(model, optimizer, baton::make_synthetic_dataset(96, 7), baton::make_synthetic_dataset(50, 8),
                           options);
    trainer.add_plugin("lr_monitor", load_plugin(baton::test::plugin_file("lr_monitor"), "lr_monitor", "").plugin);
    trainer.fit();

    // Batch b (1-based) trains at factor 1 - (b - 1) / 6: 1, 5/6, 4/6, 3/6, 2/6, 1/6.
    std::ifstream in(dir / "metrics.jsonl");
    std::vector<double> group0(7, -1), group1(7, -1);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (!j.contains("lr/group0")) continue;
      CHECK(j.contains("lr/group1"));
      const auto batch = j["batch"].get<std::int64_t>();
      REQUIRE(batch >= 1);
      REQUIRE(batch <= 6);
      group0[batch] = j["lr/group0"].get<double>();
      group1[batch] = j["lr/group1"].get<double>();
    }
    for (int b = 1; b <= 6; ++b) {
      CAPTURE(b);
      const double factor = 1.0 - (b - 1) / 6.0;
      CHECK(group0[b] == doctest::Approx(0.1 * factor).epsilon(1e-12));
      CHECK(group1[b] == doctest::Approx(0.4 * factor).epsilon(1e-12));
    }
  }

  TEST_CASE("it has no keys") {
    CHECK(contains(config_error(baton::test::plugin_file("lr_monitor"), "lr_monitor", "every = 2"), "every"));
  }
}

}  // namespace lr_monitor_test
