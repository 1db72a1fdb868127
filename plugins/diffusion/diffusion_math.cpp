#include "diffusion_math.h"

#include <ATen/ops/clamp.h>
#include <ATen/ops/diag.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linalg_eigh.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/outer.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "baton/error.h"

namespace baton_diffusion {

std::vector<double> alphas_bar(Schedule schedule, std::int64_t steps) {
  if (steps < 1) throw baton::Error("diffusion: the number of timesteps must be at least 1");
  std::vector<double> out(static_cast<std::size_t>(steps) + 1);
  out[0] = 1.0;
  const double pi = std::acos(-1.0);
  const double s = 0.008;
  const auto f = [&](double t) {
    const double c = std::cos((t / static_cast<double>(steps) + s) / (1 + s) * pi / 2);
    return c * c;
  };
  for (std::int64_t t = 1; t <= steps; ++t) {
    double beta = 0;
    if (schedule == Schedule::linear) {
      // T = 1 has one beta: the first, 1e-4.
      beta = steps == 1 ? 1e-4 : 1e-4 + (0.02 - 1e-4) * static_cast<double>(t - 1) / static_cast<double>(steps - 1);
    } else {
      beta = std::min(1 - f(static_cast<double>(t)) / f(static_cast<double>(t - 1)), 0.999);
    }
    out[static_cast<std::size_t>(t)] = out[static_cast<std::size_t>(t - 1)] * (1 - beta);
  }
  return out;
}

namespace {

// A per-sample factor [N, 1, 1, ...] of a table indexed by t, in `like`'s dtype and device.
at::Tensor per_sample(const std::vector<double>& table, const at::Tensor& t, const at::Tensor& like) {
  const at::Tensor values = at::tensor(table, at::kDouble).index_select(0, t.to(at::kLong).cpu());
  std::vector<std::int64_t> shape(static_cast<std::size_t>(like.dim()), 1);
  shape[0] = like.size(0);
  return values.to(like.device(), like.scalar_type()).view(shape);
}

}  // namespace

at::Tensor noised(const at::Tensor& x0, const at::Tensor& t, const at::Tensor& noise,
                  const std::vector<double>& alpha_bar) {
  std::vector<double> signal(alpha_bar.size()), spread(alpha_bar.size());
  for (std::size_t i = 0; i < alpha_bar.size(); ++i) {
    signal[i] = std::sqrt(alpha_bar[i]);
    spread[i] = std::sqrt(1 - alpha_bar[i]);
  }
  return per_sample(signal, t, x0).mul(x0).add(per_sample(spread, t, x0).mul(noise));
}

std::vector<std::int64_t> ddim_timesteps(std::int64_t steps, std::int64_t count) {
  if (count < 1 || count > steps)
    throw baton::Error("diffusion: sample_steps must lie in [1, " + std::to_string(steps) + "], got " +
                       std::to_string(count));
  std::vector<std::int64_t> out;
  for (std::int64_t i = count - 1; i >= 0; --i) {
    const double at = count == 1 ? static_cast<double>(steps)
                                 : 1 + static_cast<double>(steps - 1) * static_cast<double>(i) / (count - 1);
    out.push_back(static_cast<std::int64_t>(std::llround(at)));
  }
  return out;
}

at::Tensor ddim_sample(const at::Tensor& x_T, const std::vector<double>& alpha_bar, std::int64_t count,
                       const NoisePredictor& predict, bool clip) {
  const std::int64_t steps = static_cast<std::int64_t>(alpha_bar.size()) - 1;
  const std::vector<std::int64_t> taus = ddim_timesteps(steps, count);
  at::Tensor x = x_T;
  for (std::size_t i = 0; i < taus.size(); ++i) {
    const std::int64_t t = taus[i];
    const std::int64_t next = i + 1 < taus.size() ? taus[i + 1] : 0;
    const double ab = alpha_bar[static_cast<std::size_t>(t)];
    const double ab_next = alpha_bar[static_cast<std::size_t>(next)];
    const at::Tensor timestep = at::full({x.size(0)}, t, x.options().dtype(at::kLong));
    // The network may answer in a lower precision (autocast); the sampler's state stays in x_T's dtype.
    const at::Tensor eps = predict(x, timestep).to(x.scalar_type());
    at::Tensor x0 = x.sub(eps.mul(std::sqrt(1 - ab))).div(std::sqrt(ab));
    if (clip) x0 = x0.clamp(-1, 1);
    x = next == 0 ? x0 : x0.mul(std::sqrt(ab_next)).add(eps.mul(std::sqrt(1 - ab_next)));
  }
  return x;
}

double frechet_distance(const at::Tensor& mu_r, const at::Tensor& cov_r, const at::Tensor& mu_g,
                        const at::Tensor& cov_g) {
  const at::Tensor cr = cov_r.to(at::kDouble), cg = cov_g.to(at::kDouble);
  const double mean_term = mu_r.to(at::kDouble).sub(mu_g.to(at::kDouble)).pow(2).sum().item<double>();
  // S_r^(1/2) from S_r's eigendecomposition (symmetrised first: sums of products are symmetric only up to rounding).
  auto [lr, vr] = at::linalg_eigh(cr.add(cr.t()).mul(0.5));
  const at::Tensor root_r = vr.matmul(at::diag(lr.clamp_min(0).sqrt())).matmul(vr.t());
  at::Tensor inner = root_r.matmul(cg).matmul(root_r);
  inner = inner.add(inner.t()).mul(0.5);
  const at::Tensor li = std::get<0>(at::linalg_eigh(inner));
  const double trace_root = li.clamp_min(0).sqrt().sum().item<double>();
  return mean_term + cr.trace().item<double>() + cg.trace().item<double>() - 2 * trace_root;
}

double frechet_distance(const FeatureSums& real, const FeatureSums& generated) {
  const auto moments = [](const FeatureSums& s, const char* side) {
    if (s.count < 2)
      throw baton::Error(std::string("fd: the ") + side + " side has " + std::to_string(static_cast<long long>(s.count)) +
                         " samples; a covariance needs at least 2 (evaluate on more samples)");
    const at::Tensor mu = s.sum.div(s.count);
    const at::Tensor cov = s.outer.sub(at::outer(mu, mu).mul(s.count)).div(s.count - 1);
    return std::make_pair(mu, cov);
  };
  const auto [mu_r, cov_r] = moments(real, "real");
  const auto [mu_g, cov_g] = moments(generated, "generated");
  return frechet_distance(mu_r, cov_r, mu_g, cov_g);
}

}  // namespace baton_diffusion
