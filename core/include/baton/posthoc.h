#pragma once
// The mathematics of post-hoc EMA (Karras et al. 2024, "Analyzing and improving the training dynamics of diffusion
// models", section 3), docs/posthoc.md. Part of libbaton because two clients share it: the ema plugin tracks
// profiles and writes snapshots, `baton posthoc` synthesises an EMA of any width from them.
//  - the mathematics: power-function EMA profiles, their relative width, their inner products and the least-squares
//    weights that combine stored snapshots into a profile of another width (plain float64, no tensors);
//  - PosthocTracker: one power-function EMA per σ_rel, written as snapshot files;
//  - load_snapshots / synthesise: the combination of a run's snapshots into the EMA of a chosen σ_rel.
//
// A power-function EMA of exponent γ at time t weighs the weights of time τ in [0, t] by (γ+1) τ^γ / t^(γ+1).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "baton/ema.h"
#include "baton/export.h"
#include "baton/safetensors.h"
#include "baton/state_dict.h"

namespace baton::posthoc {

/// The widest profile accepted: σ_rel of γ = 0 (a uniform average of everything so far), sqrt(1/12). A smaller γ
/// would weigh early weights more than recent ones, which no user wants from an "average of recent weights".
BATON_API double max_sigma_rel();

/// σ_rel = sqrt((γ+1) / ((γ+2)² (γ+3))), the profile's standard deviation relative to its time; γ >= 0.
BATON_API double sigma_rel_from_gamma(double gamma);

/// The γ >= 0 whose profile has relative width sigma_rel, in (0, max_sigma_rel()]: the largest real root of
/// γ³ + 7γ² + (16 − σ⁻²)γ + (12 − σ⁻²) = 0, found by bisection on the decreasing σ_rel(γ). Throws baton::Error
/// outside the range.
BATON_API double gamma_from_sigma_rel(double sigma_rel);

/// The smoothing of one update from elapsed time t_prev to t_next (any unit, t_next > t_prev >= 0):
/// β = (1 − Δt / t_next)^(γ+1). The first update (t_prev = 0) gives 0: a copy of the weights.
BATON_API double power_ema_beta(double t_prev, double t_next, double gamma);

/// One profile: a snapshot (or the target) at time t with exponent gamma.
struct Profile {
  double t = 0;
  double gamma = 0;
};

/// ∫ p_a(τ) p_b(τ) dτ of two power-function profiles.
BATON_API double profile_inner_product(const Profile& a, const Profile& b);

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
BATON_API SynthesisWeights synthesis_weights(const std::vector<Profile>& snapshots, const Profile& target,
                                             const SynthesisLimits& limits = {});

/// The range of σ_rel `baton posthoc` accepts given the tracked ones: [min / 2, min(max × 2, max_sigma_rel())].
/// Beyond a factor of 2 the profile has to be extrapolated from shapes unlike it.
struct SigmaRange {
  double low = 0;
  double high = 0;
};
BATON_API SigmaRange representable_sigma_rels(const std::vector<double>& tracked_sigma_rels);

// ---- Tracking: one power-function EMA profile per σ_rel, each an ExponentialMovingAverage updated with the smoothing
// that elapsed time gives, β = (1 − Δt / t)^(γ+1), and written as snapshots.

/// Metadata keys of a snapshot file (also read by the synthesis).
inline constexpr const char* kSnapshotTime = "baton.posthoc.t";  // batches, an integer
inline constexpr const char* kSnapshotGamma = "baton.posthoc.gamma";
inline constexpr const char* kSnapshotSigmaRel = "baton.posthoc.sigma_rel";
inline constexpr const char* kSnapshotProfile = "baton.posthoc.profile";
inline constexpr const char* kSnapshotFolder = "posthoc";

class BATON_API PosthocTracker {
 public:
  /// `options` give the profiles' dtype, device, buffer handling and exclusions (its smoothing is not used).
  PosthocTracker(std::vector<double> sigma_rels, EmaOptions options);

  /// Builds every profile from the model and sets the time to 0 (nothing averaged yet).
  void reset(const torch::nn::Module& model);
  /// Restarts every profile from the model's current weights as if they had been the weights since time 0.
  void restart_at(const torch::nn::Module& model, std::int64_t t);
  bool initialized() const;

  /// One update at elapsed time t (batches, > time()): the first copies the weights, later ones average with
  /// β = (1 − (t − time()) / t)^(γ+1) per profile.
  void update(const torch::nn::Module& model, std::int64_t t);
  std::int64_t time() const { return time_; }

  void to(const std::string& device);
  std::size_t profiles() const { return profiles_.size(); }
  const std::string& profile_name(std::size_t i) const { return names_[i]; }
  double gamma(std::size_t i) const { return gammas_[i]; }
  double sigma_rel(std::size_t i) const { return sigma_rels_[i]; }
  /// Caller-owned copies of a profile's tensors under the model's names.
  NamedTensors profile_tensors(std::size_t i) const;
  /// Bytes held by all profiles.
  std::int64_t bytes() const;

  /// Writes every profile at the current time to <run_dir>/posthoc/<profile>_<t>.safetensors (atomically, with
  /// time, γ and σ_rel in the metadata) unless this time was already written; returns the files' total bytes.
  /// Profiles sharded over the ranks (EmaOptions::shard_over) are gathered, a collective: every rank calls this,
  /// and only the one given `write` (rank 0) writes; the others return 0.
  std::int64_t write_snapshots(const std::filesystem::path& run_dir, bool write = true);
  std::int64_t last_snapshot() const { return last_snapshot_; }
  /// Removes snapshots newer than time() (left by a run that went further than the checkpoint resumed from).
  void remove_snapshots_after_now(const std::filesystem::path& run_dir) const;

  /// Profiles ("posthoc/<i>/<name>"; sharded ones as each rank's rows, ExponentialMovingAverage::save_rows), time and
  /// the last snapshot's time.
  void save(StateDict& out) const;
  /// Whether `in` holds tracker state at all.
  static bool saved_in(const StateDict& in);
  /// Restores what save wrote; throws CheckpointError naming the mismatch (other σ_rels, another model).
  void load(const StateDict& in);

 private:
  std::vector<double> sigma_rels_;
  std::vector<double> gammas_;
  std::vector<std::string> names_;
  std::vector<ExponentialMovingAverage> profiles_;
  std::int64_t time_ = 0;
  std::int64_t last_snapshot_ = 0;
};

/// "sigma0.05": a profile's name in files and messages.
BATON_API std::string profile_name_for(double sigma_rel);

/// Total bytes of the snapshot files under <run_dir>/posthoc.
BATON_API std::int64_t snapshot_disk_use(const std::filesystem::path& run_dir);

// ---- Synthesis: the snapshots of <run>/posthoc combined, in float64, into the EMA of any σ_rel the tracked
// profiles can represent, cast back to the snapshots' dtype.

struct SnapshotInfo {
  std::string path;
  std::string profile;  // "sigma0.05"
  std::int64_t t = 0;   // batches
  double gamma = 0;
  double sigma_rel = 0;
};

/// Every snapshot of a run folder, loaded (tensors on the CPU), in file order.
struct BATON_API SnapshotSet {
  std::vector<SnapshotInfo> info;
  std::vector<NamedTensors> tensors;
  /// The distinct σ_rels tracked, ascending.
  std::vector<double> sigma_rels() const;
  /// The time synthesis targets: the newest snapshot's.
  std::int64_t last_time() const;
};

/// Reads <run_dir>/posthoc/*.safetensors. Throws baton::Error when the folder or the snapshots are missing, or a
/// file lacks the post-hoc metadata or holds other tensors than the first (naming the file).
BATON_API SnapshotSet load_snapshots(const std::string& run_dir);

struct SynthesisResult {
  NamedTensors tensors;  // under the model's names, in the snapshots' dtype
  double sigma_rel = 0;
  double gamma = 0;
  std::int64_t t = 0;
  SynthesisWeights weights;
};

/// The EMA of width `sigma_rel` at the last snapshot's time. Throws baton::Error for fewer than two profiles, a
/// target outside representable_sigma_rels of the tracked ones, or a system synthesis_weights refuses.
BATON_API SynthesisResult synthesise(const SnapshotSet& snapshots, double sigma_rel);

/// Throws the error synthesise would for a target out of range, without computing anything.
BATON_API void check_target(const SnapshotSet& snapshots, double sigma_rel);

}  // namespace baton::posthoc
