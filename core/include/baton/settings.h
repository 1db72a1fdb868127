#pragma once
// The settings of a run that every front end shares: a TOML file's [run] seed, [data] loader keys, [trainer] and
// [checkpoint] (baton train), and TrainerOptions, which extends them (programs that embed baton). One type, one set
// of defaults, one check: the config loader reports a problem at its key's file:line:column, the Trainer throws it
// naming the option. No LibTorch here.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "baton/error.h"  // SourceLocation
#include "baton/export.h"
#include "baton/mix64.h"  // kDefaultSeed
#include "baton/time.h"

namespace baton {

/// Composer's precision: fp32; amp_bf16 (autocast to bfloat16 around the forward pass and the loss, on the CPU or
/// CUDA); amp_fp16 (autocast to float16 with dynamic loss scaling, CUDA only); automatic ("auto", the default):
/// amp_bf16 where the device computes bfloat16 natively (a CPU with avx512_bf16 or AMX, a CUDA device of compute
/// capability 8.0 or later), fp32 elsewhere, where emulated bfloat16 is slower than fp32. Weights, gradients,
/// optimizer state and an EMA stay fp32 in every one.
enum class Precision { fp32, amp_bf16, amp_fp16, automatic };

/// How a data-parallel run splits its training state across the ranks (ZeRO's stages; FSDP2's names beside them):
/// none, every rank holds the whole model, its gradients and optimizer state (DDP); zero1, each rank keeps the
/// optimizer state of its shard only, the gradients are reduce-scattered, each rank steps its shard and the
/// parameters are all-gathered (FSDP has no name for it); zero2, the full gradients are released after the reduce
/// too (FSDP1's SHARD_GRAD_OP, FSDP2's reshard_after_forward=False); zero3, the parameters are sharded at rest (FSDP2's
/// reshard_after_forward=True): named so that a config asking for it is told it is not built yet.
enum class Sharding { none, zero1, zero2, zero3 };

/// "none", "zero1", "zero2", "zero3".
BATON_API const char* sharding_name(Sharding sharding);
/// The sharding named `name`; none for any other text.
BATON_API std::optional<Sharding> sharding_from_name(std::string_view name);

/// The precision a run trains in, and why: what "auto" chose on the run's device, or the configured one.
struct PrecisionChoice {
  Precision precision = Precision::fp32;  // never automatic
  std::string why;  // "auto: this CPU would emulate bfloat16, slower than fp32 (no avx512_bf16 or amx_bf16 ...)"
};

/// "fp32", "amp_bf16", "amp_fp16", "auto".
BATON_API const char* precision_name(Precision precision);
/// The precision named `name`; none for any other text.
BATON_API std::optional<Precision> precision_from_name(std::string_view name);

/// Fine-tuning ([model] init; Composer's load_weights_only and load_ignore_keys): a fresh run's model starts from
/// these weights instead of its initialisation; the optimizer, schedule and EMA start fresh. A resume ignores it (the
/// checkpoint holds the weights).
struct WeightsInit {
  /// A safetensors file of a state dict (baton's model.safetensors or ema.safetensors, or Python's
  /// `save_file(model.state_dict(), ...)`), a baton checkpoint folder, or a run folder (its exports); "": none.
  std::string path;
  /// Which weights of a checkpoint or run folder: "ema" (ema.safetensors), "raw" (the trained weights themselves),
  /// "auto" (the EMA's where the folder holds them, else the raw ones). A file is loaded as it is ("auto" only).
  std::string weights = "auto";
  /// Every model tensor not ignored must be in the source and every source tensor not ignored in the model; false
  /// loads the names both have (shapes must still agree).
  bool strict = true;
  /// Globs over tensor names ("classifier.*"): model tensors left as initialised, source tensors not read.
  std::vector<std::string> ignore;
};

/// [optimizer] weight_decay_exclude and lr_scale: the optimizer's parameters in param groups (timm's and Composer's
/// no weight decay on biases and normalisation weights; per-layer learning rates). Group 0 is the optimizer as
/// configured; sharded runs group each rank's shards alike.
struct ParamGroupRules {
  /// Parameters trained with weight decay 0: kinds ("bias", "norm": a module whose type name contains Norm,
  /// "embedding") or globs over dotted names ("*.pos_embed").
  std::vector<std::string> weight_decay_exclude;
  /// (glob, multiplier) in order: a parameter's lr is the optimizer's (as scheduled) times the multiplier of the
  /// first glob that matches its name; 1 when none does.
  std::vector<std::pair<std::string, double>> lr_scale;
  bool empty() const { return weight_decay_exclude.empty() && lr_scale.empty(); }
};

/// [checkpoint] keep_best (Lightning's ModelCheckpoint monitor, mode and save_top_k): the best `keep` checkpoints
/// by `metric` as the evaluation at their batch measured it, copied into <run folder>/best/ with best.json ranking
/// them; checkpoints/ and keep_last are unaffected. A plugin may ask for the same selection (the EMA's `select`).
struct KeepBest {
  std::string metric;            // "eval/accuracy"; "": no selection
  std::int64_t keep = 1;         // >= 1
  std::optional<bool> maximize;  // mode "max" (true) or "min"; none: the metric's own direction
  SourceLocation where;          // of `metric` in a config file, where an error about it points
  bool enabled() const { return !metric.empty(); }
};

struct TrainerSettings {
  Time max_duration = Time(1, TimeUnit::epoch);   // ep, ba or sp; > 0
  Time eval_interval = Time(1, TimeUnit::epoch);  // ep, ba or dur; 0 disables periodic evaluation
  std::int64_t batch_size = 128;                  // >= 1
  std::int64_t eval_batch_size = 1000;            // >= 1
  /// The data loader (docs/data.md): `workers` background threads (0 to 256) call Dataset::get for the batches
  /// ahead, at most `prefetch` batches ahead of the one being trained on (or evaluated, or predicted). 0 workers:
  /// each batch is fetched in the trainer's thread when it is needed. Every setting trains on the same batches in
  /// the same order.
  std::int64_t workers = 1;
  std::int64_t prefetch = 0;  // 0: two per worker (prefetch_batches()); else at least `workers`
  std::uint64_t seed = kDefaultSeed;  // data order; `baton train` also seeds model initialisation with it
  /// Intra-op threads for the run (at::set_num_threads); 0 leaves LibTorch's setting as it is (`baton train`: one
  /// per core, shared by the ranks on the machine).
  std::int64_t threads = 0;
  std::string device = "cpu";  // cpu | cuda | cuda:N: where the model, optimizer state and batches live
  /// CPU tensor memory during fit(): "caching" keeps freed blocks of 256 KiB and more for the next tensor (no page
  /// faults in a step that repeats its sizes; resident memory within 1.25 x the peak of live tensors); "compact"
  /// the same cache held at the live peak by resizing blocks (their grown pages fault again); "system" leaves every
  /// allocation to LibTorch's allocator and the C library. docs/config.md.
  std::string cpu_allocator = "caching";
  Precision precision = Precision::automatic;  // evaluation and prediction run under the same precision
  /// Gradient accumulation (Composer's device_train_microbatch_size): each batch is split into microbatches of
  /// this many samples, each forward/backward with the events before_forward … after_backward, and one optimizer
  /// step per batch. 0 (or >= batch_size): the whole batch at once.
  std::int64_t microbatch_size = 0;
  /// Records the training step (forward, loss, backward, the optimizer step, capturable plugins) as one CUDA graph
  /// after a few warm-up steps and replays it per batch (docs/performance.md). Needs a CUDA device and LibTorch.
  bool cuda_graphs = false;
  Time log_interval = Time(50, TimeUnit::batch);  // ba, > 0: how often train/loss is computed and logged
  bool progress = true;                           // a progress bar when stderr is a terminal
  /// A run whose weights are not finite (NaN, inf) at its end fails (fit() throws, naming the last checkpoint
  /// saved with finite weights; no model.safetensors is written) unless this is true. A non-finite training loss
  /// is always reported, at its batch, as a warning.
  bool allow_nonfinite = false;
  /// Wall-clock time (s, min, h) the fit may take: before it runs out the run saves a checkpoint and stops (exit 0,
  /// StopCause::time_limit), so a cluster job's limit ends in a checkpoint `--resume auto` continues from. 0: none.
  Time time_limit = Time(0, TimeUnit::second);
  Time save_interval = Time(1, TimeUnit::epoch);  // ep, ba, or s/min/h of training time; 0 disables periodic saves
  std::int64_t keep_last = 0;                     // >= 0; 0 keeps every checkpoint
  std::string checkpoint_dir;                     // "": <run folder>/checkpoints
  /// [distributed] sharding (docs/distributed.md). zero1, zero2 and zero3 build the optimizer over the rank's shard
  /// (the Trainer needs TrainerOptions::optimizer_factory for that); zero3 also keeps each unit's parameters
  /// (TrainerOptions::units) whole only while the unit runs. A world of one runs the same sharded step without
  /// collectives.
  Sharding sharding = Sharding::none;

  /// The batches the loader fetches ahead: `prefetch`, or two per worker (two with none) when it is 0.
  std::int64_t prefetch_batches() const { return prefetch > 0 ? prefetch : 2 * (workers > 0 ? workers : 1); }
};

/// One setting that cannot run. `key` is its name in a config file ("data.workers"), `option` its member of
/// TrainerSettings ("workers"); the message reads "expected <expected>, got <got>".
struct SettingProblem {
  std::string key;
  std::string option;
  std::string expected;  // "an integer in [0, 256]"
  std::string got;       // the value as given, "-1"
};

/// Every problem of `settings`, in the order of the members above (empty when there is none): ranges, the time
/// units each interval takes, the device's form, prefetch against workers, amp_fp16 on a CUDA device.
BATON_API std::vector<SettingProblem> setting_problems(const TrainerSettings& settings);

/// The most loader threads a setting may ask for: more than the cores can pay for a dataset that waits on
/// storage; this many is a typo.
inline constexpr std::int64_t kMaxWorkers = 256;

}  // namespace baton
