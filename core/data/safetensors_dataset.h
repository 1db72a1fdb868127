#pragma once
// The `safetensors` dataset: named tensors of a safetensors file as batch fields, rows along dim 0, read a batch's
// rows at a time, so a file larger than memory trains with resident memory of a few batches (docs/data.md).
#include "baton/components.h"

namespace baton {

/// [data] name = "safetensors": keys path, inputs, targets, fields, float_fields, task, num_classes, eval_path,
/// eval_fraction
/// (docs/config.md). Errors are ConfigErrors at the key, naming the file and the problem.
DatasetSplits make_safetensors_dataset(const PluginConfig& config, const DatasetContext& context);

}  // namespace baton
