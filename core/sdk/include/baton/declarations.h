#pragma once
// What a plugin declares about the run before it starts (Plugin::declare): the metrics it logs and their
// directions, the metrics it acts on, the weight sets it keeps, the evaluation passes it adds. A plugin declares
// through methods, so a later baton adds declarations without moving anything a built plugin uses (LLVM's pass
// plugins grow the same way). No LibTorch here: `baton check` and `--weights` read every declaration before a
// model is built.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/export.h"

namespace baton {

class PluginConfig;

/// A metric a plugin acts on (a stopper's `monitor`, the EMA's `select.metric`), with the configuration key that
/// named it and where that key is, so that a name the run never logs, or one without a known direction, is
/// reported there before the run starts.
struct WatchedMetric {
  std::string metric;
  std::string key;
  SourceLocation where;
  /// From the `mode` key beside it: true for "max", false for "min"; none to rank by the metric's own direction
  /// (RunFacts::maximizes).
  std::optional<bool> maximize;
};

/// Reads a watched metric from a plugin's table: `metric_key` (required: a metric name such as "eval/accuracy")
/// and `mode_key` (optional: "min" or "max"), with the getters' errors at either key.
BATON_API WatchedMetric read_watched_metric(const PluginConfig& table, const std::string& metric_key,
                                            const std::string& mode_key = "mode");

/// A plugin's request for the run's checkpoint selection (Declarations::keep_best).
struct BestCheckpointsRequest {
  WatchedMetric metric;
  std::int64_t keep = 1;
};

class BATON_API Declarations {
 public:
  /// What is known of the run when plugins declare: its device ("cpu", "cuda:1"), its number of ranks, and the
  /// weight set a standalone evaluation or prediction asks for (`--weights`; empty: the plugins' default).
  Declarations(std::string device = "cpu", int world_size = 1, std::string requested_weights = "");
  ~Declarations();
  Declarations(const Declarations&) = delete;
  Declarations& operator=(const Declarations&) = delete;

  const std::string& device() const;
  int world_size() const;
  const std::string& requested_weights() const;

  /// A metric the plugin logs ("ema/smoothing"), without a direction (a stopper on it must set `mode`).
  void metric(const std::string& name);
  /// A metric the plugin logs, and whether a higher value is better ("throughput/samples_per_sec": true).
  void metric(const std::string& name, bool higher_is_better);
  /// Every metric whose name starts with `prefix` ("l2_norm/grad/", one per layer), for names that depend on the
  /// model.
  void metric_family(const std::string& prefix);
  /// A metric the plugin acts on: the run refuses, at its key, a name it never logs and, when `maximize` is not
  /// given, a metric whose direction no one declares.
  void watch(const WatchedMetric& metric);
  /// A weight set the plugin keeps and swaps in ("ema", "raw"): the names `--weights` may ask for.
  void weight_set(const std::string& name);
  /// An evaluation pass besides "eval", run at every evaluation point after it (the EMA's "eval_raw" evaluates
  /// the raw weights beside the average); its metrics are logged as "<label>/<metric>".
  void eval_pass(const std::string& label);

  /// Asks the run to keep its best `keep` checkpoints by `metric` in <run folder>/best/, as [checkpoint] keep_best
  /// does (the EMA's `select`). A run keeps one selection: a request that differs from keep_best or from another
  /// plugin's is refused at its key before the run starts; the same one given twice is one selection.
  void keep_best(const WatchedMetric& metric, std::int64_t keep);
  /// A file the plugin adds to every checkpoint it saves (CheckpointInProgress::add_tensors_file) that best/ also
  /// shows beside best.json, as the best checkpoint holds it (the EMA's ema.safetensors): the file a user takes.
  void best_file(const std::string& filename);

  /// The plugin works only when every rank holds the whole training state (distributed.sharding = "none"): it reads
  /// or changes the model's gradients after they are reduced, or writes the model's weights during training, which
  /// a sharded step (zero1, zero2) neither uses nor keeps. `what` completes "it ...": "clips the model's gradients
  /// after the reduce". A sharded run refuses the plugin, naming it, the mode and `what`.
  void replicated_only(const std::string& what);

  /// The plugin's handlers of the step's events (before_forward … after_train_batch, and batch_end) may be recorded
  /// into a CUDA graph and replayed (trainer.cuda_graphs): each step they launch the same device work on tensors
  /// that keep their storage, read nothing back to the host, take what changes per step from device tensors, and
  /// do only host bookkeeping while State::capture.replayed is true. A run with cuda_graphs refuses a plugin that
  /// handles before_forward … after_train_batch without declaring this; batch_end handlers of plugins that do not
  /// declare it run after the graph, uncaptured.
  void capturable();

  // What was declared, in order, each once (for baton and tests).
  const std::vector<std::string>& metrics() const;
  const std::map<std::string, bool>& directions() const;
  const std::vector<std::string>& metric_families() const;
  const std::vector<WatchedMetric>& watched() const;
  const std::vector<std::string>& weight_sets() const;
  const std::vector<std::string>& eval_passes() const;
  const std::vector<BestCheckpointsRequest>& keep_best_requests() const;
  const std::vector<std::string>& best_files() const;
  /// How many times capturable() was called (the trainer compares the count before and after each plugin declares).
  std::size_t capturable_count() const;
  /// What each replicated_only() call said, in order.
  const std::vector<std::string>& replicated_only_reasons() const;

 private:
  struct Data;
  std::unique_ptr<Data> data_;
};

}  // namespace baton
