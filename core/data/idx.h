#pragma once
// The IDX file format (MNIST, Fashion-MNIST): a big-endian header (magic 0x0000 0x08 <ndims>, then ndims uint32
// sizes) followed by unsigned bytes. Files may be gzip-compressed; zlib reads both forms.
#include <cstdint>
#include <string>
#include <vector>


namespace baton {

struct IdxArray {
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;  // product(shape) bytes
};

/// Reads an IDX file of unsigned bytes (type code 0x08). Throws baton::Error naming the file and the problem.
IdxArray read_idx_file(const std::string& path);

/// Reads only the header's shape (cheap: for checking a configuration against the data before loading it).
/// Throws baton::Error naming the file and the problem.
std::vector<std::int64_t> read_idx_shape(const std::string& path);

}  // namespace baton
