#pragma once
// Private to core/data's tests: files written byte for byte, plain or gzip-compressed.
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "baton_test.h"
#include "error_text.h"

namespace baton::data_test {

inline void write_plain(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_gz(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  gzFile out = gzopen(path.string().c_str(), "wb");
  REQUIRE(out != nullptr);
  REQUIRE(gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  gzclose(out);
}

using baton::test::contains;

}  // namespace baton::data_test
