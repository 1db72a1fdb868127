#include "baton_test.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <ATen/ops/arange.h>
#include <ATen/ops/randn.h>

#include "algorithm_test_support.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace cutmix_test {

using namespace algorithm_test;

namespace {

constexpr std::int64_t kSide = 28;  // the synthetic images are [1, 28, 28]

struct Box {
  std::int64_t top = kSide, left = kSide, bottom = 0, right = 0;
  std::int64_t area() const { return bottom > top && right > left ? (bottom - top) * (right - left) : 0; }
  bool inside(std::int64_t h, std::int64_t w) const { return h >= top && h < bottom && w >= left && w < right; }
};

// The bounding box of every pixel that some row changed.
Box changed_box(const Rows& drawn, const Rows& mixed) {
  Box box;
  for (std::size_t i = 0; i < drawn.size(); ++i)
    for (std::size_t k = 0; k < drawn[i].size(); ++k)
      if (drawn[i][k] != mixed[i][k]) {
        const std::int64_t h = static_cast<std::int64_t>(k) / kSide % kSide, w = static_cast<std::int64_t>(k) % kSide;
        box.top = std::min(box.top, h);
        box.bottom = std::max(box.bottom, h + 1);
        box.left = std::min(box.left, w);
        box.right = std::max(box.right, w + 1);
      }
  return box;
}

// For each row i, the row j whose box the mixed row holds (exactly), with everything outside the box its own; -1
// when no row fits.
std::vector<std::int64_t> partners(const Rows& drawn, const Rows& mixed, const Box& box) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < mixed.size(); ++i) {
    std::int64_t found = -1;
    for (std::size_t j = 0; j < drawn.size() && found < 0; ++j) {
      bool fits = true;
      for (std::size_t k = 0; k < mixed[i].size() && fits; ++k) {
        const std::int64_t h = static_cast<std::int64_t>(k) / kSide % kSide, w = static_cast<std::int64_t>(k) % kSide;
        fits = mixed[i][k] == (box.inside(h, w) ? drawn[j][k] : drawn[i][k]);
      }
      if (fits) found = static_cast<std::int64_t>(j);
    }
    out.push_back(found);
  }
  return out;
}

baton::TrainerOptions two_epochs() {
  auto o = quiet_options();
  o.eval_interval = Time(0, TimeUnit::epoch);
  o.save_interval = Time(0, TimeUnit::epoch);
  return o;
}

// Checks every batch of a run: the pasted box, lambda = 1 - box_area / (H W), and the mixed targets. Returns how
// many batches had a non-empty box.
int check_run(const std::string& toml) {
  Records records = train_probed(toml, "cutmix", two_epochs());
  REQUIRE(records.size() == 6);
  int with_box = 0;
  for (const auto& [batch, r] : records) {
    CAPTURE(batch);
    const Rows drawn = rows_of(r.drawn_inputs), mixed = rows_of(r.inputs);
    const Box box = changed_box(drawn, mixed);
    const double lambda = r.metrics.at("cutmix/lambda");
    CHECK(lambda == doctest::Approx(1.0 - static_cast<double>(box.area()) / (kSide * kSide)).epsilon(1e-12));
    const auto labels = labels_of(r.drawn_targets);
    std::vector<std::int64_t> partner(labels.size());
    if (box.area() > 0) {
      ++with_box;
      partner = partners(drawn, mixed, box);
      std::set<std::int64_t> distinct(partner.begin(), partner.end());
      CHECK(distinct.size() == partner.size());  // a permutation (and no -1: every row fits)
      CHECK(*distinct.begin() == 0);
    } else {
      for (std::size_t i = 0; i < partner.size(); ++i) partner[i] = static_cast<std::int64_t>(i);
    }
    std::vector<double> expected;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      std::vector<double> row(10, 0.0);
      row[static_cast<std::size_t>(labels[i])] += lambda;
      row[static_cast<std::size_t>(labels[static_cast<std::size_t>(partner[i])])] += 1 - lambda;
      expected.insert(expected.end(), row.begin(), row.end());
    }
    REQUIRE(r.loss_targets.size() == 1);
    CHECK(max_abs_difference(values_of(r.loss_targets[0]), expected) < 1e-6);
    CHECK(std::abs(r.losses[0].item<double>() - hand_cross_entropy(rows_of(r.outputs[0]), rows_of(r.loss_targets[0]))) <
          1e-5);
  }
  return with_box;
}

}  // namespace

TEST_SUITE("cutmix_plugin") {
  TEST_CASE("a box of the permuted batch is pasted; lambda is 1 - box area / image area; targets mix by lambda") {
    CHECK(check_run("alpha = 1.0") >= 4);
    CHECK(check_run("alpha = 2.0\nuniform_sampling = true") >= 4);
  }

  TEST_CASE("interpolate_loss keeps class targets and mixes the two cross entropies by lambda") {
    Records records = train_probed("interpolate_loss = true", "cutmix", two_epochs());
    for (const auto& [batch, r] : records) {
      CAPTURE(batch);
      const Rows drawn = rows_of(r.drawn_inputs), mixed = rows_of(r.inputs);
      const Box box = changed_box(drawn, mixed);
      if (box.area() == 0) continue;
      const auto partner = partners(drawn, mixed, box);
      const double lambda = r.metrics.at("cutmix/lambda");
      CHECK((r.loss_targets[0].scalar_type() == at::kLong));
      const auto labels = labels_of(r.drawn_targets);
      Rows own, other;
      for (std::size_t i = 0; i < labels.size(); ++i) {
        own.push_back(one_hot(labels[i], 10));
        other.push_back(one_hot(labels[static_cast<std::size_t>(partner[i])], 10));
      }
      const Rows logits = rows_of(r.outputs[0]);
      const double expected = lambda * hand_cross_entropy(logits, own) + (1 - lambda) * hand_cross_entropy(logits, other);
      CHECK(std::abs(r.losses[0].item<double>() - expected) < 1e-5);
    }
  }

  TEST_CASE("alpha = 0 gives the largest box: sides int(28 sqrt(1 - 0)) = 28 around the centre, clipped") {
    // Per side, with the centre c uniform in [0, 28): [c - 14, c + 14) clipped to [0, 28), so it starts at 0
    // (c < 14, length c + 14 >= 14) or ends at 28 (c >= 14, length 42 - c >= 15).
    auto plugin = load("alpha = 0", "cutmix");
    auto& algorithm = dynamic_cast<baton::Algorithm&>(*plugin.plugin);
    RecordingLogger logger;
    std::set<double> lambdas;
    for (std::int64_t b = 0; b < 20; ++b) {
      baton::State state;
      state.facts.set_seed(3);
      state.progress.now.batch = b;
      state.batch = baton::Batch::of(at::randn({6, 1, kSide, kSide}), at::arange(6));
      const Rows drawn = rows_of(state.batch.inputs());
      baton::run_subscribed(algorithm, Event::after_dataloader, state, logger);
      const Box box = changed_box(drawn, rows_of(state.batch.inputs()));
      // Every side is 14 + (distance of the centre to the far edge, at most 14): at least 14 long.
      CHECK(box.bottom - box.top >= 14);
      CHECK(box.right - box.left >= 14);
      CHECK((box.top == 0 || box.bottom == kSide));
      CHECK((box.left == 0 || box.right == kSide));
      lambdas.insert(logger.last("cutmix/lambda"));
    }
    CHECK(lambdas.size() > 5);
  }

  TEST_CASE("inputs that are not images are an error naming the plugin") {
    auto plugin = load("", "cutmix");
    RecordingLogger logger;
    baton::State state;
    state.batch = baton::Batch::of(at::randn({4, 3}), at::arange(4));
    CHECK_THROWS_WITH(baton::run_subscribed(*plugin.plugin, Event::after_dataloader, state, logger),
                      doctest::Contains("cutmix: expects images [N, C, H, W] in the batch field 'inputs', got shape "
                                        "[4, 3] (name another field with input_key)"));
  }

  TEST_CASE("input_key and target_key choose the fields; a missing one is an error naming those present") {
    auto plugin = load("input_key = \"images\"\ntarget_key = \"labels\"", "cutmix");
    RecordingLogger logger;
    baton::State state;
    const at::Tensor images = at::randn({4, 1, 8, 8});
    const at::Tensor untouched = at::randn({4, 1, 8, 8});
    state.batch = baton::Batch{{"images", images}, {"labels", at::arange(4)}, {"inputs", untouched}};
    auto& algorithm = dynamic_cast<baton::Algorithm&>(*plugin.plugin);
    baton::run_subscribed(algorithm, Event::after_dataloader, state, logger);
    CHECK_FALSE(state.batch["images"].equal(images));  // boxes pasted from other images
    CHECK(state.batch["inputs"].equal(untouched));     // the field not named is left alone
    state.batch = baton::Batch{{"inputs", images}, {"targets", at::arange(4)}};
    CHECK_THROWS_WITH(baton::run_subscribed(algorithm, Event::after_dataloader, state, logger),
                      doctest::Contains("the batch has no field 'images' (its fields: inputs [4, 1, 8, 8] Float, "
                                        "targets [4] Long)"));
  }

  TEST_CASE("a run stopped and resumed with cutmix ends bitwise identical to an uninterrupted one") {
    const ResumeComparison runs = train_stopped_and_resumed("alpha = 1.0", "cutmix");
    CHECK(runs.resumed_end == 9);
    CHECK(bitwise_equal(runs.resumed, runs.whole));
    CHECK_FALSE(bitwise_equal(runs.whole, runs.without_plugin));
  }

  TEST_CASE("bad keys are configuration errors at their line") {
    const std::string error = config_error("uniform_sampling = false\nalpha = -0.5", "cutmix");
    CHECK(contains(error, "run.toml:2"));
    CHECK(contains(error, "plugins.cutmix.alpha: must be a finite number >= 0, got -0.5"));
    CHECK(contains(config_error("uniform_sampling = 1", "cutmix"), "plugins.cutmix.uniform_sampling"));
    CHECK(contains(config_error("length = 0.5", "cutmix"), "unknown key 'length'"));
  }
}

}  // namespace cutmix_test
