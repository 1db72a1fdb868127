#pragma once
// A grid of grey or RGB images as one PNG file (Debian's libpng).
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

namespace baton_diffusion {

/// Writes images [N, C, H, W] (C = 1 or 3, values in [0, 1], any float dtype and device) as a grid of `columns`
/// columns with a 2-pixel dark border, 8-bit, to `path` (through "<path>.tmp" and a rename, so a reader never sees
/// a partial file). Throws baton::Error naming the file.
void write_png_grid(const std::string& path, const at::Tensor& images, std::int64_t columns);

}  // namespace baton_diffusion
