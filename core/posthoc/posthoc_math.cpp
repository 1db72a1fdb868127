#include "baton/posthoc.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <set>
#include <string>

#include "baton/error.h"
#include "baton/time.h"

namespace baton::posthoc {
namespace {

using Matrix = std::vector<std::vector<double>>;

// Eigenvalues (returned) and eigenvectors (columns of `vectors`) of a symmetric matrix by cyclic Jacobi rotations:
// slow for large n but accurate to the last bits on the small, badly scaled Gram matrices of synthesis.
std::vector<double> symmetric_eigen(Matrix a, Matrix& vectors) {
  const std::size_t n = a.size();
  vectors.assign(n, std::vector<double>(n, 0.0));
  for (std::size_t i = 0; i < n; ++i) vectors[i][i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, total = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) (i == j ? total : off) += a[i][j] * a[i][j];
    if (off <= 1e-30 * (total + off)) break;
    for (std::size_t p = 0; p + 1 < n; ++p)
      for (std::size_t q = p + 1; q < n; ++q) {
        if (a[p][q] == 0.0) continue;
        double theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
        double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (std::size_t k = 0; k < n; ++k) {  // columns p, q
          double akp = a[k][p], akq = a[k][q];
          a[k][p] = c * akp - s * akq;
          a[k][q] = s * akp + c * akq;
        }
        for (std::size_t k = 0; k < n; ++k) {  // rows p, q
          double apk = a[p][k], aqk = a[q][k];
          a[p][k] = c * apk - s * aqk;
          a[q][k] = s * apk + c * aqk;
        }
        for (std::size_t k = 0; k < n; ++k) {
          double vkp = vectors[k][p], vkq = vectors[k][q];
          vectors[k][p] = c * vkp - s * vkq;
          vectors[k][q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<double> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = a[i][i];
  return values;
}

// The minimum-norm least-squares solution of the symmetric positive semi-definite system a x = b: directions whose
// eigenvalue is below `relative_cutoff` of the largest carry rounding noise, not information, and are dropped.
std::vector<double> pseudo_inverse_solve(const Matrix& a, const std::vector<double>& b, double relative_cutoff) {
  Matrix v;
  std::vector<double> lambda = symmetric_eigen(a, v);
  const std::size_t n = b.size();
  double largest = *std::max_element(lambda.begin(), lambda.end());
  if (!(largest > 0)) throw Error("post-hoc EMA: the snapshots' system is singular (all profiles vanish)");
  std::vector<double> x(n, 0.0);
  for (std::size_t k = 0; k < n; ++k) {
    if (lambda[k] <= relative_cutoff * largest) continue;
    double projection = 0;
    for (std::size_t i = 0; i < n; ++i) projection += v[i][k] * b[i];
    for (std::size_t i = 0; i < n; ++i) x[i] += v[i][k] * projection / lambda[k];
  }
  return x;
}

void check_profile(const Profile& p, const char* what) {
  if (!(p.t > 0) || !std::isfinite(p.t))
    throw Error(std::string("post-hoc EMA: ") + what + " has time " + format_number(p.t) +
                ": expected a positive time");
  if (!(p.gamma >= 0) || !std::isfinite(p.gamma))
    throw Error(std::string("post-hoc EMA: ") + what + " has exponent " + format_number(p.gamma) +
                ": expected γ >= 0");
}

}  // namespace

double max_sigma_rel() { return std::sqrt(1.0 / 12.0); }

double sigma_rel_from_gamma(double gamma) {
  if (!(gamma >= 0) || !std::isfinite(gamma))
    throw Error("post-hoc EMA: exponent γ = " + format_number(gamma) + " is outside [0, ∞)");
  return std::sqrt((gamma + 1) / ((gamma + 2) * (gamma + 2) * (gamma + 3)));
}

double gamma_from_sigma_rel(double sigma_rel) {
  if (!(sigma_rel > 0 && sigma_rel <= max_sigma_rel()))
    throw Error("post-hoc EMA: sigma_rel " + format_number(sigma_rel) + " is outside (0, " +
                format_number(max_sigma_rel()) +
                "] (0.2887 is a uniform average of all weights so far; smaller is shorter)");
  // σ_rel(γ) decreases from max_sigma_rel() at γ = 0 and behaves like 1/γ for large γ, so [0, 2/σ + 10] brackets
  // the root; bisection halves the bracket down to the spacing of doubles.
  double low = 0, high = 2.0 / sigma_rel + 10.0;
  for (int i = 0; i < 200 && high - low > 4 * std::numeric_limits<double>::epsilon() * high; ++i) {
    double mid = 0.5 * (low + high);
    (sigma_rel_from_gamma(mid) > sigma_rel ? low : high) = mid;
  }
  return 0.5 * (low + high);
}

double power_ema_beta(double t_prev, double t_next, double gamma) {
  if (!(t_next > t_prev) || t_prev < 0)
    throw Error("post-hoc EMA: an update must move time forward (from " + format_number(t_prev) + " to " +
                format_number(t_next) + ")");
  return std::pow(1.0 - (t_next - t_prev) / t_next, gamma + 1.0);
}

double profile_inner_product(const Profile& a, const Profile& b) {
  double ratio = a.t / b.t;
  double exponent = a.t < b.t ? b.gamma : -a.gamma;
  return (a.gamma + 1) * (b.gamma + 1) * std::pow(ratio, exponent) / ((a.gamma + b.gamma + 1) * std::max(a.t, b.t));
}

SynthesisWeights synthesis_weights(const std::vector<Profile>& snapshots, const Profile& target,
                                   const SynthesisLimits& limits) {
  std::set<double> exponents;
  for (const auto& s : snapshots) {
    check_profile(s, "a snapshot");
    exponents.insert(s.gamma);
  }
  check_profile(target, "the target");
  if (exponents.size() < 2)
    throw Error("post-hoc EMA: synthesis needs snapshots of at least two profiles (different sigma_rel), found " +
                std::to_string(exponents.size()));
  const std::size_t n = snapshots.size();
  // Scaled to a unit diagonal, so the eigenvalue cutoff is relative to the profiles' shapes, not their times.
  std::vector<double> scale(n);
  for (std::size_t i = 0; i < n; ++i) scale[i] = 1.0 / std::sqrt(profile_inner_product(snapshots[i], snapshots[i]));
  Matrix a(n, std::vector<double>(n));
  std::vector<double> b(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j)
      a[i][j] = scale[i] * scale[j] * profile_inner_product(snapshots[i], snapshots[j]);
    b[i] = scale[i] * profile_inner_product(snapshots[i], target);
  }
  std::vector<double> y = pseudo_inverse_solve(a, b, 1e-13);
  SynthesisWeights out;
  out.weights.resize(n);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += out.weights[i] = scale[i] * y[i];
  if (!(std::fabs(sum) > 1e-12) || !std::isfinite(sum))
    throw Error("post-hoc EMA: the system for the target is ill-conditioned (its weights sum to " +
                format_number(sum) + ", which cannot be normalised)");
  for (double& w : out.weights) {
    w /= sum;
    out.weight_l1 += std::fabs(w);
  }
  // ‖Σ w p − p_r‖² = wᵀ A w − 2 wᵀ b + p_r·p_r, with the unscaled A and b.
  double quadratic = 0, linear = 0;
  for (std::size_t i = 0; i < n; ++i) {
    linear += out.weights[i] * profile_inner_product(snapshots[i], target);
    for (std::size_t j = 0; j < n; ++j)
      quadratic += out.weights[i] * out.weights[j] * profile_inner_product(snapshots[i], snapshots[j]);
  }
  double norm = profile_inner_product(target, target);
  out.fit_error = std::sqrt(std::max(0.0, quadratic - 2 * linear + norm) / norm);
  if (out.weight_l1 > limits.max_weight_l1)
    throw Error("post-hoc EMA: the system for sigma_rel " + format_number(sigma_rel_from_gamma(target.gamma)) +
                " is ill-conditioned: the snapshot weights' sum of magnitudes is " + format_number(out.weight_l1) +
                " (limit " + format_number(limits.max_weight_l1) + "), so rounding would swamp the result");
  if (out.fit_error > limits.max_fit_error)
    throw Error("post-hoc EMA: the snapshots cannot represent sigma_rel " +
                format_number(sigma_rel_from_gamma(target.gamma)) + ": the best combination's profile is off by " +
                format_number(100 * out.fit_error) + "% (limit " + format_number(100 * limits.max_fit_error) + "%)");
  return out;
}

SigmaRange representable_sigma_rels(const std::vector<double>& tracked_sigma_rels) {
  if (tracked_sigma_rels.empty()) throw Error("post-hoc EMA: no tracked profiles");
  auto [low, high] = std::minmax_element(tracked_sigma_rels.begin(), tracked_sigma_rels.end());
  return {*low / 2.0, std::min(*high * 2.0, max_sigma_rel())};
}

}  // namespace baton::posthoc
