#pragma once
// The arithmetic of denoising diffusion, apart from any network so that tests check it against hand computations:
// the noise schedules (DDPM's linear one, Nichol & Dhariwal's cosine one), the forward noising q(x_t | x_0), the
// deterministic DDIM sampler (eta = 0) and the Frechet distance between two Gaussians fitted to feature sums.
// Formulas: docs/diffusion.md (and the papers it cites).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace baton_diffusion {

enum class Schedule { linear, cosine };

/// alpha_bar_t for t = 0..T (index t; alpha_bar_0 = 1, the clean image), computed in double.
///  linear: beta_t from 1e-4 to 0.02 evenly over t = 1..T (DDPM), alpha_bar_t = prod_{s<=t} (1 - beta_s);
///  cosine: f(t) = cos^2(((t/T) + s)/(1 + s) * pi/2), s = 0.008, beta_t = 1 - f(t)/f(t-1) clipped to <= 0.999,
///          alpha_bar_t = prod_{s<=t} (1 - beta_s) (equal to f(t)/f(0) wherever no clipping happened).
std::vector<double> alphas_bar(Schedule schedule, std::int64_t steps);

/// x_t = sqrt(alpha_bar_t) x_0 + sqrt(1 - alpha_bar_t) noise, per sample: x0 and noise [N, ...], t int64 [N] in
/// [0, T]. Computed in x0's dtype (the schedule's values rounded to it).
at::Tensor noised(const at::Tensor& x0, const at::Tensor& t, const at::Tensor& noise,
                  const std::vector<double>& alpha_bar);

/// The DDIM timesteps tau_S > ... > tau_1: `count` of them evenly spaced in [1, T], rounded, largest first.
std::vector<std::int64_t> ddim_timesteps(std::int64_t steps, std::int64_t count);

/// A noise predictor eps_theta(x_t, t): x_t [N, ...], t int64 [N] (every entry the same timestep).
using NoisePredictor = std::function<at::Tensor(const at::Tensor& x_t, const at::Tensor& t)>;

/// Deterministic DDIM (eta = 0) from x_T over `count` timesteps:
///   x0_hat = (x_t - sqrt(1 - ab_t) eps) / sqrt(ab_t)     (clamped to [-1, 1] when `clip`: images live there)
///   x_t'   = sqrt(ab_t') x0_hat + sqrt(1 - ab_t') eps     (t' the next smaller timestep, ab_0 = 1 at the end)
/// Returns x_0 in x_T's dtype. A predictor that returns the true noise of a fixed x_0 recovers that x_0.
at::Tensor ddim_sample(const at::Tensor& x_T, const std::vector<double>& alpha_bar, std::int64_t count,
                       const NoisePredictor& predict, bool clip);

/// Running sums of one feature set: the count, sum f [d] and sum f f^T [d, d], all float64, so that ranks (and
/// batches) add exactly what one pass over everything would.
struct FeatureSums {
  double count = 0;
  at::Tensor sum;    // [d] double
  at::Tensor outer;  // [d, d] double
};

/// FD = |mu_r - mu_g|^2 + Tr(S_r + S_g - 2 (S_r S_g)^(1/2)), covariances unbiased (N - 1). The trace of the square
/// root is that of (S_r^(1/2) S_g S_r^(1/2))^(1/2), a symmetric positive semi-definite matrix: two symmetric
/// eigendecompositions in float64, eigenvalues below zero (rounding) taken as zero. Needs count >= 2 per side.
double frechet_distance(const FeatureSums& real, const FeatureSums& generated);
/// The same from means [d] and covariances [d, d] (double).
double frechet_distance(const at::Tensor& mu_r, const at::Tensor& cov_r, const at::Tensor& mu_g,
                        const at::Tensor& cov_g);

}  // namespace baton_diffusion
