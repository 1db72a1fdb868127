#include "png_grid.h"

#include <png.h>

#include <ATen/ops/full.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "baton/error.h"

namespace baton_diffusion {

namespace {

struct PngFile {
  FILE* file = nullptr;
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngFile() {
    if (png) png_destroy_write_struct(&png, info ? &info : nullptr);
    if (file) std::fclose(file);
  }
};

}  // namespace

void write_png_grid(const std::string& path, const at::Tensor& images, std::int64_t columns) {
  if (images.dim() != 4 || (images.size(1) != 1 && images.size(1) != 3))
    throw baton::Error("sample grid '" + path + "': expected images [N, 1 or 3, H, W]");
  const std::int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  const std::int64_t border = 2;
  const std::int64_t cols = std::max<std::int64_t>(1, std::min(columns, n));
  const std::int64_t rows = (n + cols - 1) / cols;
  const std::int64_t width = cols * (w + border) + border, height = rows * (h + border) + border;
  // Rounded to 0..255, channels last, then placed cell by cell into one canvas.
  const at::Tensor bytes =
      images.detach().to(at::kFloat).cpu().clamp(0, 1).mul(255).round().to(at::kByte).permute({0, 2, 3, 1}).contiguous();
  std::vector<std::uint8_t> canvas(static_cast<std::size_t>(width * height * c), 32);
  const std::uint8_t* src = bytes.data_ptr<std::uint8_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t top = border + (i / cols) * (h + border), left = border + (i % cols) * (w + border);
    for (std::int64_t y = 0; y < h; ++y)
      std::copy(src + ((i * h + y) * w) * c, src + ((i * h + y) * w + w) * c,
                canvas.begin() + ((top + y) * width + left) * c);
  }
  const std::string temporary = path + ".tmp";
  {
    PngFile out;
    out.file = std::fopen(temporary.c_str(), "wb");
    if (!out.file) throw baton::Error("sample grid '" + path + "': cannot open '" + temporary + "' for writing");
    out.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
    if (out.png) out.info = png_create_info_struct(out.png);
    if (!out.png || !out.info) throw baton::Error("sample grid '" + path + "': libpng could not start");
    // libpng reports errors by longjmp: nothing with a destructor lives between here and the writes below.
    if (setjmp(png_jmpbuf(out.png))) throw baton::Error("sample grid '" + path + "': libpng failed to write it");
    png_init_io(out.png, out.file);
    png_set_IHDR(out.png, out.info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
                 c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(out.png, out.info);
    for (std::int64_t y = 0; y < height; ++y)
      png_write_row(out.png, canvas.data() + y * width * c);
    png_write_end(out.png, nullptr);
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) throw baton::Error("sample grid '" + path + "': cannot rename '" + temporary + "': " + error.message());
}

}  // namespace baton_diffusion
