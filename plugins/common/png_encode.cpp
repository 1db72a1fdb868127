#include "png_encode.h"

#include <png.h>

#include "baton/error.h"

namespace baton_plugins {
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

std::vector<std::uint8_t> encode_png(const baton::Image& image, const std::string& what) {
  const int channels = static_cast<int>(image.channels);
  if (image.height <= 0 || image.width <= 0 || (channels != 1 && channels != 3 && channels != 4) ||
      image.pixels.size() != static_cast<std::size_t>(image.height * image.width * image.channels))
    throw baton::Error(what + ": cannot encode a " + std::to_string(image.height) + "x" + std::to_string(image.width) +
                       "x" + std::to_string(image.channels) + " image of " + std::to_string(image.pixels.size()) +
                       " values as PNG");
  std::vector<std::uint8_t> out;
  PngWriter writer;
  writer.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (writer.png) writer.info = png_create_info_struct(writer.png);
  if (!writer.png || !writer.info) throw baton::Error(what + ": libpng could not start");
  // libpng reports errors by longjmp: nothing with a destructor is created between here and the writes below.
  if (setjmp(png_jmpbuf(writer.png))) throw baton::Error(what + ": libpng failed to encode the image");
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

}  // namespace baton_plugins
