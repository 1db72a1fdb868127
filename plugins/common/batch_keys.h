#pragma once
// Which batch fields an algorithm acts on (Composer's input_key / target_key): the keys `input_key` (default
// "inputs") and `target_key` (default "targets") of its table. A missing field is the batch's own error, which names
// the fields it has; a field of the wrong shape is an error naming the plugin, the field and its shape.
// Header-only, SDK-only.
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "baton/error.h"
#include "baton/plugin_config.h"
#include "baton/state.h"
#include "baton/text.h"

namespace baton_algorithms {

struct BatchKeys {
  std::string input = "inputs";
  std::string target = "targets";

  static BatchKeys from(const baton::PluginConfig& config) {
    return BatchKeys{config.get_or("input_key", "inputs"), config.get_or("target_key", "targets")};
  }

  at::Tensor& input_of(baton::State& state) const { return state.batch[input]; }
  at::Tensor& target_of(baton::State& state) const { return state.batch[target]; }

  /// The input field, which must be images [N, C, H, W].
  at::Tensor& images_of(baton::State& state, const std::string& plugin) const {
    at::Tensor& images = input_of(state);
    if (images.dim() != 4)
      throw baton::Error(plugin + ": expects images [N, C, H, W] in the batch field '" + input + "', got shape " +
                         baton::format_shape(images.sizes()) + " (name another field with input_key)");
    return images;
  }
};

}  // namespace baton_algorithms
