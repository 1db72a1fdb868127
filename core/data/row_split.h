#pragma once
// The evaluation split that a dataset whose files hold none draws for itself (csv, safetensors): [data]
// eval_fraction (default 0.2) of the rows, chosen from the run's seed. One implementation, so the datasets read the
// key, check it and draw alike.
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "baton/plugin_config.h"

namespace baton {

struct RowSplit {
  // Row numbers (int64, ascending: each part keeps the file's order, the draw decides only membership). Both
  // undefined for eval_fraction = 0: every row trains, in order, and the training rows are evaluated.
  at::Tensor train;
  at::Tensor eval;
  bool held_out() const { return eval.defined(); }
};

/// Reads eval_fraction from `config` and draws the split of `rows` rows with `seed` (the run's seed, salted per
/// dataset). A fraction that rounds to no evaluation or no training row is a ConfigError at the key.
RowSplit draw_row_split(const PluginConfig& config, std::int64_t rows, std::uint64_t seed);

}  // namespace baton
