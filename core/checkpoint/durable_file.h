#pragma once
// Durable file operations for crash-safe checkpoints: data reaches the disk (fsync) before the rename that makes
// it visible, and the folder holding a renamed entry is fsynced so the rename itself survives a power cut.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "baton/durable_file.h"

namespace baton {

// fsync_path, rename_durably and write_file_atomic are public: baton/durable_file.h.
/// zlib crc32 of a whole file, streaming. Throws baton::Error naming the file.
std::uint32_t crc32_of_file(const std::string& path);
std::string read_text_file(const std::string& path);  // throws baton::Error naming the file

/// A file written sequentially with POSIX calls, counting its bytes and their crc32 as they go, so a writer gets
/// the digest of a large file without reading it back. finish() fsyncs and closes; a writer destroyed without
/// finish() closes the file and leaves it for the caller to delete.
class DurableFileWriter {
 public:
  explicit DurableFileWriter(std::string path);  // creates or truncates; throws baton::Error naming the file
  ~DurableFileWriter();
  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;

  void write(const void* data, std::size_t size);
  void finish();
  std::uint64_t bytes() const { return bytes_; }
  std::uint32_t crc32() const { return crc32_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;
  std::uint32_t crc32_ = 0;
};

}  // namespace baton
