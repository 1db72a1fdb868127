#pragma once
// Files for tests, free of LibTorch (the whole-program tests include it alone): a scratch folder per test, and a
// file's bytes read and replaced.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace baton::test {

/// A fresh, empty folder under the build tree's test scratch area, named after the test.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::path(BATON_BINARY_DIR) / "test-scratch" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// A file's bytes, as they are on disk.
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// Replaces a file's content with `bytes` (to truncate or corrupt it).
inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// True where BATON_TEST_WITHOUT_DEBIAN=1 says the machine has none of Debian's reference tools that some tests
/// compare against (its dataset packages, scikit-learn's data files, numpy and scipy): scripts/gpu-check.sh sets it
/// on a machine with PyTorch but not Debian's packages. Those test cases take `* doctest::skip(without_debian())`
/// and are counted as skipped there; everywhere else they run, and fail if a tool is missing.
inline bool without_debian() {
  const char* value = std::getenv("BATON_TEST_WITHOUT_DEBIAN");
  return value != nullptr && std::string(value) == "1";
}

}  // namespace baton::test
