#pragma once
// A grid of grey or RGB images as one 8-bit picture (written as PNG with plugins/common/png_encode.h).
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "baton/logger_destination.h"

namespace baton_diffusion {

/// Images [N, C, H, W] (C = 1 or 3, values in [0, 1], any float dtype and device) as a grid of `columns` columns
/// with a 2-pixel dark border, 8-bit. Throws baton::Error for another shape.
baton::Image grid_image(const at::Tensor& images, std::int64_t columns);

}  // namespace baton_diffusion
