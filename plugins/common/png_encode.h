#pragma once
// An 8-bit image as PNG bytes in memory (Debian's libpng), for the plugins that write or log pictures: the
// diffusion sample grids, the tensorboard logger's image summaries. Compiled into each plugin that uses it.
#include <cstdint>
#include <string>
#include <vector>

#include "baton/logger_destination.h"

namespace baton_plugins {

/// The PNG encoding of `image` (1, 3 or 4 channels: grey, RGB, RGBA). Throws baton::Error naming `what` when the
/// image's size does not match its pixels or libpng fails.
std::vector<std::uint8_t> encode_png(const baton::Image& image, const std::string& what);

}  // namespace baton_plugins
