#pragma once
// Fine-tuning's start: the model's weights read from a safetensors file, a checkpoint or a run folder before a fresh
// run's first step (TrainerOptions::init, [model] init). Tensors are matched by name, globs leave some as the model
// initialised them, and every mismatch is listed in one error with the names the user probably meant.
#include <cstddef>
#include <string>
#include <vector>

#include "baton/trainer.h"

namespace baton {

/// What init_weights loaded, for the run's log line.
struct InitReport {
  std::string source;                // "runs/a/checkpoints/ep3 (its EMA weights, ema.safetensors)"
  std::size_t loaded = 0;            // model tensors given the source's values
  std::vector<std::string> kept;     // model tensors left as initialised: ignored, or absent with strict = false
  std::vector<std::string> unused;   // the source's tensors not loaded: ignored, or unknown with strict = false

  /// The run's log line: "model.init: 10 tensors from ...; 2 kept as initialised (a, b); 1 of the source's not
  /// used (c)".
  std::string summary() const;
};

/// Loads `init` into `module`'s parameters and buffers in place (without gradients; dtypes converted to the
/// module's). Throws baton::Error naming `key` ("model.init") and the source: a path that is no
/// such file or folder (with the OS reason), a checkpoint without the weights asked for, or the mismatches (model
/// tensors missing from the source, source tensors the model lacks, shapes that differ), all in one message.
InitReport init_weights(torch::nn::Module& module, const WeightsInit& init, const std::string& key = "model.init");

}  // namespace baton
