#pragma once
// The mathematics of post-hoc EMA (Karras et al. 2024, "Analyzing and improving the training dynamics of diffusion
// models", section 3): power-function EMA profiles, their relative width, their inner products and the least-squares
// weights that combine stored snapshots into a profile of another width. Plain float64, no LibTorch, so it is
// testable on its own and shared by the ema plugin (tracking) and `baton posthoc` (synthesis). docs/posthoc.md.
//
// A power-function EMA of exponent γ at time t weighs the weights of time τ in [0, t] by (γ+1) τ^γ / t^(γ+1).
#include <vector>

namespace baton::posthoc {

/// The widest profile accepted: σ_rel of γ = 0 (a uniform average of everything so far), sqrt(1/12). A smaller γ
/// would weigh early weights more than recent ones, which no user wants from an "average of recent weights".
double max_sigma_rel();

/// σ_rel = sqrt((γ+1) / ((γ+2)² (γ+3))), the profile's standard deviation relative to its time; γ >= 0.
double sigma_rel_from_gamma(double gamma);

/// The γ >= 0 whose profile has relative width sigma_rel, in (0, max_sigma_rel()]: the largest real root of
/// γ³ + 7γ² + (16 − σ⁻²)γ + (12 − σ⁻²) = 0, found by bisection on the decreasing σ_rel(γ). Throws baton::Error
/// outside the range.
double gamma_from_sigma_rel(double sigma_rel);

/// The smoothing of one update from elapsed time t_prev to t_next (any unit, t_next > t_prev >= 0):
/// β = (1 − Δt / t_next)^(γ+1). The first update (t_prev = 0) gives 0: a copy of the weights.
double power_ema_beta(double t_prev, double t_next, double gamma);

/// One profile: a snapshot (or the target) at time t with exponent gamma.
struct Profile {
  double t = 0;
  double gamma = 0;
};

/// ∫ p_a(τ) p_b(τ) dτ of two power-function profiles.
double profile_inner_product(const Profile& a, const Profile& b);

/// The snapshot weights that synthesise `target`, and how well.
struct SynthesisWeights {
  std::vector<double> weights;  // one per snapshot, summing to 1
  double fit_error = 0;         // ‖Σ w_i p_i − p_target‖ / ‖p_target‖ (L2 over τ), after normalisation
  double weight_l1 = 0;         // Σ |w_i|: large means cancellation between snapshots
};

/// Limits of a synthesis; defaults are those of docs/posthoc.md.
struct SynthesisLimits {
  double max_fit_error = 0.2;   // the snapshots cannot represent the target beyond this
  double max_weight_l1 = 1e4;   // beyond this the float32 snapshots cancel away the result's precision
};

/// Least-squares weights: A w = b with A_ij = p_i·p_j and b_i = p_i·p_target, solved in float64 through the
/// eigen-decomposition of the diagonally scaled A (a minimum-norm solution when snapshots are nearly dependent),
/// then normalised to sum 1. Throws baton::Error for fewer than two distinct exponents, non-positive times, a
/// singular system, or weights beyond `limits` (naming the measure and the limit).
SynthesisWeights synthesis_weights(const std::vector<Profile>& snapshots, const Profile& target,
                                   const SynthesisLimits& limits = {});

/// The range of σ_rel `baton posthoc` accepts given the tracked ones: [min / 2, min(max × 2, max_sigma_rel())].
/// Beyond a factor of 2 the profile has to be extrapolated from shapes unlike it.
struct SigmaRange {
  double low = 0;
  double high = 0;
};
SigmaRange representable_sigma_rels(const std::vector<double>& tracked_sigma_rels);

}  // namespace baton::posthoc
