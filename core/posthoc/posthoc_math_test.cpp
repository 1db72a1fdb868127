// The post-hoc EMA math on its own (no trainer, no tensors): σ_rel ↔ γ, β from elapsed time, inner products and
// synthesis weights, against hand computations and independent numerical integration.
#include "baton_test.h"  // first: baton/posthoc.h brings LibTorch headers

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/posthoc.h"
#include "error_text.h"

using baton::test::error_text;

using namespace baton::posthoc;

namespace {

// ∫_0^T p_a p_b dτ by the midpoint rule on a fine grid: an independent check of the closed form.
double integrate_profiles(const Profile& a, const Profile& b) {
  const int steps = 400000;
  const double end = std::max(a.t, b.t);
  double sum = 0;
  for (int k = 0; k < steps; ++k) {
    double tau = (k + 0.5) * end / steps;
    auto density = [tau](const Profile& p) {
      return tau > p.t ? 0.0 : (p.gamma + 1) * std::pow(tau, p.gamma) / std::pow(p.t, p.gamma + 1);
    };
    sum += density(a) * density(b);
  }
  return sum * end / steps;
}

}  // namespace

TEST_SUITE("posthoc") {
  TEST_CASE("posthoc: sigma_rel and gamma convert both ways (Karras et al.'s values)") {
    CHECK(gamma_from_sigma_rel(0.05) == doctest::Approx(16.97).epsilon(1e-3));
    CHECK(gamma_from_sigma_rel(0.28) == doctest::Approx(0.169).epsilon(3e-3));
    // γ = 0: sqrt(1 / (4 · 3)); γ = 1: sqrt(2 / (9 · 4)).
    CHECK(sigma_rel_from_gamma(0.0) == doctest::Approx(std::sqrt(1.0 / 12.0)));
    CHECK(sigma_rel_from_gamma(1.0) == doctest::Approx(std::sqrt(2.0 / 36.0)));
    for (double sigma : {0.01, 0.05, 0.08, 0.10, 0.2, 0.28}) {
      double gamma = gamma_from_sigma_rel(sigma);
      // γ is the largest root of γ³ + 7γ² + (16 − t)γ + (12 − t) with t = σ⁻².
      double t = 1.0 / (sigma * sigma);
      double cubic = gamma * gamma * gamma + 7 * gamma * gamma + (16 - t) * gamma + (12 - t);
      CHECK(std::fabs(cubic) < 1e-9 * t * (gamma + 1));
      CHECK(sigma_rel_from_gamma(gamma) == doctest::Approx(sigma).epsilon(1e-12));
    }
    CHECK(gamma_from_sigma_rel(max_sigma_rel()) == doctest::Approx(0.0).epsilon(1e-9));
    CHECK(error_text([] { gamma_from_sigma_rel(0.3); }).find("outside (0, 0.288675]") != std::string::npos);
    CHECK(error_text([] { gamma_from_sigma_rel(0.0); }).find("sigma_rel 0 is outside") != std::string::npos);
  }

  TEST_CASE("posthoc: beta comes from elapsed time, not from the number of updates") {
    CHECK(power_ema_beta(0, 4, 7.0) == 0.0);                               // the first update copies
    CHECK(power_ema_beta(1, 2, 0.0) == doctest::Approx(0.5));              // γ = 0: a running mean
    CHECK(power_ema_beta(8, 12, 2.0) == doctest::Approx(std::pow(8.0 / 12.0, 3.0)));
    // Every 4 batches: β at batch 12 is (8/12)^(γ+1), not ema-pytorch's (1 − 1/12)^(γ+1), which counts one batch.
    CHECK(std::fabs(power_ema_beta(8, 12, 2.0) - std::pow(11.0 / 12.0, 3.0)) > 0.4);
    CHECK(power_ema_beta(96, 100, 5.0) == doctest::Approx(std::pow(0.96, 6.0)));
    CHECK(error_text([] { power_ema_beta(5, 5, 1.0); }).find("move time forward") != std::string::npos);
  }

  TEST_CASE("posthoc: the inner product of two profiles matches numerical integration") {
    for (auto [a, b] : std::vector<std::pair<Profile, Profile>>{
             {{100, 2.0}, {100, 2.0}}, {{60, 3.0}, {100, 0.5}}, {{100, 6.94}, {40, 16.97}}, {{30, 0.0}, {90, 0.0}}}) {
      CHECK(profile_inner_product(a, b) == doctest::Approx(integrate_profiles(a, b)).epsilon(1e-4));
      CHECK(profile_inner_product(a, b) == doctest::Approx(profile_inner_product(b, a)).epsilon(1e-12));
    }
  }

  TEST_CASE("posthoc: synthesis weights reproduce a tracked profile, refuse what cannot be represented") {
    const double g05 = gamma_from_sigma_rel(0.05), g10 = gamma_from_sigma_rel(0.10);
    std::vector<Profile> snapshots;
    for (double gamma : {g05, g10})
      for (int i = 1; i <= 20; ++i) snapshots.push_back({50.0 * i, gamma});
    // A target equal to one snapshot: all weight on it.
    auto exact = synthesis_weights(snapshots, {1000, g10});
    CHECK(exact.weights[39] == doctest::Approx(1.0).epsilon(1e-6));
    CHECK(exact.fit_error < 1e-6);
    auto between = synthesis_weights(snapshots, {1000, gamma_from_sigma_rel(0.08)});
    double sum = 0;
    for (double w : between.weights) sum += w;
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(between.fit_error < 0.01);
    CHECK(between.weight_l1 < 5);

    std::vector<Profile> one_profile(snapshots.begin(), snapshots.begin() + 20);
    CHECK(error_text([&] { synthesis_weights(one_profile, {1000, g10}); }).find("at least two profiles") !=
          std::string::npos);
    std::string far = error_text([&] { synthesis_weights(snapshots, {1000, gamma_from_sigma_rel(0.01)}); });
    CHECK(far.find("cannot represent sigma_rel 0.01") != std::string::npos);
    SynthesisLimits strict;
    strict.max_weight_l1 = 2;
    CHECK(error_text([&] { synthesis_weights(snapshots, {1000, gamma_from_sigma_rel(0.03)}, strict); })
              .find("ill-conditioned") != std::string::npos);
  }

  TEST_CASE("posthoc: the representable range is a factor of 2 around the tracked widths") {
    auto range = representable_sigma_rels({0.10, 0.05});
    CHECK(range.low == doctest::Approx(0.025));
    CHECK(range.high == doctest::Approx(0.20));
    CHECK(representable_sigma_rels({0.05, 0.2}).high == doctest::Approx(max_sigma_rel()));
  }
}
