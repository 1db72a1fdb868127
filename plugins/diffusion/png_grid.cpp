#include "png_grid.h"

#include <algorithm>
#include <vector>

#include "baton/error.h"

namespace baton_diffusion {

baton::Image grid_image(const at::Tensor& images, std::int64_t columns) {
  if (images.dim() != 4 || (images.size(1) != 1 && images.size(1) != 3))
    throw baton::Error("sample grid: expected images [N, 1 or 3, H, W]");
  const std::int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  const std::int64_t border = 2;
  const std::int64_t cols = std::max<std::int64_t>(1, std::min(columns, n));
  const std::int64_t rows = (n + cols - 1) / cols;
  baton::Image grid;
  grid.width = cols * (w + border) + border;
  grid.height = rows * (h + border) + border;
  grid.channels = c;
  // Rounded to 0..255, channels last, then placed cell by cell into one canvas.
  const at::Tensor bytes =
      images.detach().to(at::kFloat).cpu().clamp(0, 1).mul(255).round().to(at::kByte).permute({0, 2, 3, 1}).contiguous();
  grid.pixels.assign(static_cast<std::size_t>(grid.width * grid.height * c), 32);
  const std::uint8_t* src = bytes.data_ptr<std::uint8_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t top = border + (i / cols) * (h + border), left = border + (i % cols) * (w + border);
    for (std::int64_t y = 0; y < h; ++y)
      std::copy(src + ((i * h + y) * w) * c, src + ((i * h + y) * w + w) * c,
                grid.pixels.begin() + ((top + y) * grid.width + left) * c);
  }
  return grid;
}

}  // namespace baton_diffusion
