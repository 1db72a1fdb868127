#pragma once
// A safetensors file opened for reading parts of it: the header parsed and validated once (everything
// read_safetensors checks), the tensor bytes left on disk and read on demand by position. read_safetensors and
// validate_safetensors are built on it; so is the `safetensors` dataset, which reads a batch's rows at a time from
// files larger than memory. Private to baton (not exported).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

namespace baton {

struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // data_offsets, relative to the end of the header
  std::uint64_t end = 0;
};

class SafetensorsFile {
 public:
  /// Opens and validates `path`. Throws SafetensorsError naming the file and the problem: the OS's reason when it
  /// cannot be opened, the format problem when it is not a (complete) safetensors file.
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t file_bytes() const { return size_; }
  /// The tensors in header order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  /// The tensor called `name`, or nullptr.
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Where the tensor bytes start in the file (8 + the header length); an entry's bytes are at data_start() + begin.
  std::uint64_t data_start() const { return data_start_; }

  /// Reads `count` bytes at file offset `offset` into `into`, with pread: safe to call from several threads at
  /// once (no shared file position). Throws SafetensorsError with the OS's reason, or when the file has shrunk.
  void read_at(std::uint64_t offset, void* into, std::uint64_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// "F32", "BF16", ... for the dtypes the format knows; nullptr for others.
const char* safetensors_dtype_name(at::ScalarType type);

}  // namespace baton
