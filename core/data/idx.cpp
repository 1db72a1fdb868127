#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <memory>
#include <string>

#include "baton/error.h"

namespace baton {
namespace {

// Far beyond any real IDX file; guards the size computation against overflow from a corrupt header.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw Error("IDX file '" + path + "': " + problem);
}

// Reads up to `size` bytes; returns how many were read (fewer only at the end of the file).
std::int64_t read_bytes(gzFile file, const std::string& path, std::uint8_t* out, std::int64_t size) {
  std::int64_t total = 0;
  while (total < size) {
    // gzread takes an unsigned count; read in chunks well below its limit.
    const auto chunk = static_cast<unsigned>(std::min<std::int64_t>(size - total, 1 << 30));
    const int got = gzread(file, out + total, chunk);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file, &code);
      fail(path, std::string("read error: ") + (message ? message : "unknown zlib error"));
    }
    if (got == 0) break;
    total += got;
  }
  return total;
}

void read_exact(gzFile file, const std::string& path, std::uint8_t* out, std::int64_t size, const char* what) {
  const std::int64_t got = read_bytes(file, path, out, size);
  if (got != size)
    fail(path, std::string("truncated ") + what + ": expected " + std::to_string(size) + " bytes, found " +
                   std::to_string(got));
}

std::int64_t big_endian_u32(const std::uint8_t* bytes) {
  return (std::int64_t{bytes[0]} << 24) | (std::int64_t{bytes[1]} << 16) | (std::int64_t{bytes[2]} << 8) |
         std::int64_t{bytes[3]};
}

std::vector<std::int64_t> read_header(gzFile file, const std::string& path) {
  std::uint8_t magic[4];
  read_exact(file, path, magic, 4, "header");
  if (magic[0] != 0 || magic[1] != 0)
    fail(path, "bad magic number (the first two bytes must be 0; is this an IDX file?)");
  if (magic[2] != 0x08)
    fail(path, "unsupported element type code " + std::to_string(magic[2]) + " (only 8, unsigned bytes, is supported)");
  const int ndims = magic[3];
  if (ndims == 0) fail(path, "the header declares 0 dimensions");

  std::vector<std::uint8_t> dim_bytes(static_cast<std::size_t>(ndims) * 4);
  read_exact(file, path, dim_bytes.data(), static_cast<std::int64_t>(dim_bytes.size()), "header");
  std::vector<std::int64_t> shape(static_cast<std::size_t>(ndims));
  std::int64_t elements = 1;
  for (int d = 0; d < ndims; ++d) {
    shape[d] = big_endian_u32(&dim_bytes[static_cast<std::size_t>(d) * 4]);
    if (shape[d] != 0 && elements > kMaxElements / shape[d])
      fail(path, "the header declares an implausibly large array");
    elements *= shape[d];
  }
  return shape;
}

}  // namespace

std::vector<std::int64_t> read_idx_shape(const std::string& path) {
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) fail(path, "cannot open the file");
  return read_header(file.get(), path);
}

IdxArray read_idx_file(const std::string& path) {
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) fail(path, "cannot open the file");

  IdxArray array;
  array.shape = read_header(file.get(), path);
  std::int64_t elements = 1;
  for (auto size : array.shape) elements *= size;
  array.data.resize(static_cast<std::size_t>(elements));
  read_exact(file.get(), path, array.data.data(), elements, "data");

  std::uint8_t extra = 0;
  if (read_bytes(file.get(), path, &extra, 1) != 0)
    fail(path, "unexpected data after the " + std::to_string(elements) + " bytes declared by the header");
  return array;
}

}  // namespace baton
