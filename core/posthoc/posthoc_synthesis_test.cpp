// Post-hoc EMA with tensors, without a trainer: a profile synthesised from snapshot files against one tracked
// directly, and the errors of loading and synthesis.
#include "baton_test.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ops/zeros.h>
#include <torch/nn/module.h>

#include "baton/error.h"
#include "baton/posthoc.h"

namespace fs = std::filesystem;
using baton::posthoc::PosthocTracker;

namespace {

// One float parameter vector whose values the test sets at every step.
struct Vector : torch::nn::Module {
  at::Tensor w;
  Vector() { w = register_parameter("w", at::zeros({4})); }
  void set(const std::function<double(int)>& value) {
    auto data = w.detach();
    auto a = data.accessor<float, 1>();
    for (int j = 0; j < 4; ++j) a[j] = static_cast<float>(value(j));
  }
};

// A smooth trajectory with drift and oscillation, different per element.
double trajectory(double t, int j) { return 1.0 + 0.3 * j + 0.5 * std::sin(t / 170.0 + j) + t / 800.0; }

}  // namespace

TEST_SUITE("posthoc") {
  TEST_CASE("posthoc: a synthesised profile equals one tracked directly with the same sigma_rel") {
    auto dir = baton::test::scratch_dir("posthoc-synthesis");
    // 0.05 and 0.10 are the snapshots; 0.08 is tracked alongside only to compare with.
    PosthocTracker tracker({0.05, 0.10, 0.08}, baton::EmaOptions{});
    Vector model;
    tracker.reset(model);
    for (std::int64_t t = 1; t <= 1000; ++t) {
      model.set([t](int j) { return trajectory(static_cast<double>(t), j); });
      tracker.update(model, t);
      if (t % 20 == 0) tracker.write_snapshots(dir);
    }
    for (const auto& entry : fs::directory_iterator(dir / "posthoc"))
      if (entry.path().filename().string().rfind("sigma0.08_", 0) == 0) fs::remove(entry.path());
    auto snapshots = baton::posthoc::load_snapshots(dir.string());
    REQUIRE(snapshots.info.size() == 100);
    CHECK(snapshots.sigma_rels() == std::vector<double>{0.05, 0.10});
    CHECK(snapshots.last_time() == 1000);

    auto result = baton::posthoc::synthesise(snapshots, 0.08);
    at::Tensor direct = tracker.profile_tensors(2).front().second.to(at::kDouble);
    at::Tensor synthesised = result.tensors.front().second;
    CHECK(result.tensors.front().first == "w");
    CHECK((synthesised.scalar_type() == at::kFloat));
    double relative = ((synthesised.to(at::kDouble) - direct).abs() / direct.abs()).max().item<double>();
    CHECK(relative < 1e-4);
    // The comparison can fail: the tracked neighbours differ from 0.08 by far more.
    at::Tensor neighbour = tracker.profile_tensors(1).front().second.to(at::kDouble);
    CHECK(((neighbour - direct).abs() / direct.abs()).max().item<double>() > 100 * relative);

    CHECK_THROWS_WITH_AS(baton::posthoc::synthesise(snapshots, 0.01), doctest::Contains("can represent: [0.025, 0.2]"),
                         baton::Error);
    for (const auto& entry : fs::directory_iterator(dir / "posthoc"))
      if (entry.path().filename().string().rfind("sigma0.1_", 0) == 0) fs::remove(entry.path());
    auto one = baton::posthoc::load_snapshots(dir.string());
    CHECK_THROWS_WITH_AS(baton::posthoc::synthesise(one, 0.05), doctest::Contains("at least two profiles"),
                         baton::Error);
    CHECK_THROWS_WITH_AS(baton::posthoc::load_snapshots((dir / "nowhere").string()),
                         doctest::Contains("does not exist"), baton::Error);
  }
}
