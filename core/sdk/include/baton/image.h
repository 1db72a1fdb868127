#pragma once
// Pictures from tensors: a batch of images tiled into one 8-bit grid, and its PNG encoding (Debian's libpng), for
// the plugins that write or log pictures (the image_grid callback's sample grids, the tensorboard logger's image
// summaries). An Image (baton/logger_destination.h) also goes to the run's loggers through baton::log_image.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/export.h"
#include "baton/logger_destination.h"

namespace baton {

/// Images [N, C, H, W] (C = 1 grey or 3 RGB; any dtype and device) as one grid of `columns` columns (fewer when
/// N is smaller) with a 2-pixel dark border. Values map linearly from `low` (black, 0) to `high` (white, 255),
/// clamped and rounded: [0, 1] for images as a model's sigmoid gives them, [-1, 1] for a tanh generator's. Throws
/// baton::Error starting with `what` for another shape or low >= high.
BATON_API Image image_grid(const at::Tensor& images, std::int64_t columns, double low = 0, double high = 1,
                           const std::string& what = "image grid");

/// The PNG encoding of `image` (1, 3 or 4 channels: grey, RGB, RGBA). Throws baton::Error starting with `what`
/// when the image's size does not match its pixels or libpng fails.
BATON_API std::vector<std::uint8_t> encode_png(const Image& image, const std::string& what = "image");

}  // namespace baton
