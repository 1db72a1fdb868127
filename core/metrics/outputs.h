#pragma once
// How losses and metrics read a batch's outputs against its targets, so both accept the same shapes.
#include <string>

#include <ATen/core/Tensor.h>

#include "baton/components.h"

namespace baton::metrics_detail {

/// The outputs in the targets' shape: [N, 1] outputs against [N] targets (or any shapes with as many elements and
/// the same batch size) are viewed as the targets' shape; anything else is an Error naming `who` and both shapes.
at::Tensor fit_outputs(const std::string& who, const at::Tensor& outputs, const at::Tensor& targets);

/// A built-in loss's or metric's field keys (`output`, `target`) read from its config, and the data as that loss or
/// metric sees it: the `target` field's shape and class count in place of the targets'. A target field the data
/// does not have is an error at the `target` key naming the fields it has.
std::pair<FieldKeys, DataSpec> keyed_spec(const PluginConfig& config, const DataSpec& data);

}  // namespace baton::metrics_detail
