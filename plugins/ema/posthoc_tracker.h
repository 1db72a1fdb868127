#pragma once
// Post-hoc EMA tracking (docs/posthoc.md): one power-function EMA profile per σ_rel, each an
// ExponentialMovingAverage updated with the smoothing that elapsed time gives, β = (1 − Δt / t)^(γ+1), and written
// as snapshots from which `baton posthoc` synthesises an EMA of any width after training.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "baton/ema.h"
#include "baton/safetensors.h"
#include "baton/state_dict.h"

namespace baton::ema_plugin {

/// Metadata keys of a snapshot file (also read by the synthesis).
inline constexpr const char* kSnapshotTime = "baton.posthoc.t";  // batches, an integer
inline constexpr const char* kSnapshotGamma = "baton.posthoc.gamma";
inline constexpr const char* kSnapshotSigmaRel = "baton.posthoc.sigma_rel";
inline constexpr const char* kSnapshotProfile = "baton.posthoc.profile";
inline constexpr const char* kSnapshotFolder = "posthoc";

class PosthocTracker {
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
  std::int64_t write_snapshots(const std::filesystem::path& run_dir);
  std::int64_t last_snapshot() const { return last_snapshot_; }
  /// Removes snapshots newer than time() (left by a run that went further than the checkpoint resumed from).
  void remove_snapshots_after_now(const std::filesystem::path& run_dir) const;

  /// Profiles ("posthoc/<i>/<name>"), time and the last snapshot's time.
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
std::string profile_name_for(double sigma_rel);

/// Total bytes of the snapshot files under <run_dir>/posthoc.
std::int64_t snapshot_disk_use(const std::filesystem::path& run_dir);

}  // namespace baton::ema_plugin
