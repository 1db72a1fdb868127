#include "baton/image.h"

#include <png.h>

#include <algorithm>

#include <ATen/ops/clamp.h>

#include "baton/error.h"

namespace baton {
namespace {

struct PngWriter {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngWriter() {
    if (png) png_destroy_write_struct(&png, info ? &info : nullptr);
  }
};

// libpng's write callback: appends to the vector passed as its io pointer.
void append(png_structp png, png_bytep data, png_size_t size) {
  auto* out = static_cast<std::vector<std::uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + size);
}

void no_flush(png_structp) {}

}  // namespace

Image image_grid(const at::Tensor& images, std::int64_t columns, double low, double high, const std::string& what) {
  if (images.dim() != 4 || (images.size(1) != 1 && images.size(1) != 3))
    throw Error(what + ": expected images [N, 1 or 3, H, W], got a tensor of " + std::to_string(images.dim()) +
                " dimensions" + (images.dim() >= 2 ? " with " + std::to_string(images.size(1)) + " channels" : ""));
  if (!(low < high))
    throw Error(what + ": the value range [" + std::to_string(low) + ", " + std::to_string(high) + "] is empty");
  const std::int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  const std::int64_t border = 2;
  const std::int64_t cols = std::max<std::int64_t>(1, std::min(columns, n));
  const std::int64_t rows = (n + cols - 1) / cols;
  Image grid;
  grid.width = cols * (w + border) + border;
  grid.height = rows * (h + border) + border;
  grid.channels = c;
  // Rounded to 0..255, channels last, then placed cell by cell into one canvas of dark grey (32).
  const at::Tensor unit = images.detach().to(at::kDouble).cpu().sub(low).div(high - low).clamp(0, 1);
  const at::Tensor bytes = unit.mul(255).round().to(at::kByte).permute({0, 2, 3, 1}).contiguous();
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

std::vector<std::uint8_t> encode_png(const Image& image, const std::string& what) {
  const int channels = static_cast<int>(image.channels);
  if (image.height <= 0 || image.width <= 0 || (channels != 1 && channels != 3 && channels != 4) ||
      image.pixels.size() != static_cast<std::size_t>(image.height * image.width * image.channels))
    throw Error(what + ": cannot encode a " + std::to_string(image.height) + "x" + std::to_string(image.width) +
                       "x" + std::to_string(image.channels) + " image of " + std::to_string(image.pixels.size()) +
                       " values as PNG");
  std::vector<std::uint8_t> out;
  PngWriter writer;
  writer.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (writer.png) writer.info = png_create_info_struct(writer.png);
  if (!writer.png || !writer.info) throw Error(what + ": libpng could not start");
  // libpng reports errors by longjmp: nothing with a destructor is created between here and the writes below.
  if (setjmp(png_jmpbuf(writer.png))) throw Error(what + ": libpng failed to encode the image");
  png_set_write_fn(writer.png, &out, &append, &no_flush);
  const int color = channels == 1 ? PNG_COLOR_TYPE_GRAY : channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_RGBA;
  png_set_IHDR(writer.png, writer.info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height),
               8, color, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(writer.png, writer.info);
  const std::size_t row = static_cast<std::size_t>(image.width * image.channels);
  for (std::int64_t y = 0; y < image.height; ++y)
    png_write_row(writer.png, const_cast<png_bytep>(image.pixels.data() + static_cast<std::size_t>(y) * row));
  png_write_end(writer.png, nullptr);
  return out;
}

}  // namespace baton
