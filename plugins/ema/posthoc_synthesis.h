#pragma once
// Post-hoc EMA synthesis (docs/posthoc.md): reads the snapshots the ema plugin wrote to <run>/posthoc and combines
// them into the EMA of any σ_rel the tracked profiles can represent, in float64, cast back to the snapshots' dtype.
// Used by `baton posthoc`.
#include <cstdint>
#include <string>
#include <vector>

#include "baton/safetensors.h"

#include "posthoc_math.h"

namespace baton::ema_plugin {

struct SnapshotInfo {
  std::string path;
  std::string profile;  // "sigma0.05"
  std::int64_t t = 0;   // batches
  double gamma = 0;
  double sigma_rel = 0;
};

/// Every snapshot of a run folder, loaded (tensors on the CPU), in file order.
struct SnapshotSet {
  std::vector<SnapshotInfo> info;
  std::vector<NamedTensors> tensors;
  /// The distinct σ_rels tracked, ascending.
  std::vector<double> sigma_rels() const;
  /// The time synthesis targets: the newest snapshot's.
  std::int64_t last_time() const;
};

/// Reads <run_dir>/posthoc/*.safetensors. Throws baton::Error when the folder or the snapshots are missing, or a
/// file lacks the post-hoc metadata or holds other tensors than the first (naming the file).
SnapshotSet load_snapshots(const std::string& run_dir);

struct SynthesisResult {
  NamedTensors tensors;  // under the model's names, in the snapshots' dtype
  double sigma_rel = 0;
  double gamma = 0;
  std::int64_t t = 0;
  posthoc::SynthesisWeights weights;
};

/// The EMA of width `sigma_rel` at the last snapshot's time. Throws baton::Error for fewer than two profiles, a
/// target outside posthoc::representable_sigma_rels of the tracked ones, or a system synthesis_weights refuses.
SynthesisResult synthesise(const SnapshotSet& snapshots, double sigma_rel);

/// Throws the error synthesise would for a target out of range, without computing anything.
void check_target(const SnapshotSet& snapshots, double sigma_rel);

}  // namespace baton::ema_plugin
