#include "checkpoint/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "baton/error.h"

namespace baton {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int error) {
  throw Error(what + " " + path + ": " + std::strerror(error));
}

// zlib's crc32 takes a 32-bit length; larger spans are fed in pieces.
std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const Bytef*>(data);
  constexpr std::size_t kMaxPiece = std::numeric_limits<uInt>::max();
  while (size > 0) {
    const std::size_t piece = std::min(size, kMaxPiece);
    crc = static_cast<std::uint32_t>(::crc32(crc, bytes, static_cast<uInt>(piece)));
    bytes += piece;
    size -= piece;
  }
  return crc;
}

std::string parent_dir(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

void fsync_path(const std::string& path) {
  // O_RDONLY works for folders as well as files on Linux, and fsync on either flushes what the kernel holds.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path, errno);
  if (::fsync(fd) != 0) {
    int error = errno;
    ::close(fd);
    fail("cannot fsync", path, error);
  }
  ::close(fd);
}

void write_file_atomic(const std::string& path, std::string_view content) {
  const std::string temporary = path + ".tmp";
  try {
    DurableFileWriter writer(temporary);
    writer.write(content.data(), content.size());
    writer.finish();
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
  rename_durably(temporary, path);
}

void rename_durably(const std::string& temporary, const std::string& path) {
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    int error = errno;
    std::error_code ignored;
    std::filesystem::remove_all(temporary, ignored);
    fail("cannot rename " + temporary + " to", path, error);
  }
  fsync_path(parent_dir(path));
}

std::uint32_t crc32_of_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path, errno);
  std::vector<unsigned char> buffer(1 << 20);
  std::uint32_t crc = static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0));
  for (;;) {
    ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      int error = errno;
      ::close(fd);
      fail("cannot read", path, error);
    }
    if (got == 0) break;
    crc = crc32_update(crc, buffer.data(), static_cast<std::size_t>(got));
  }
  ::close(fd);
  return crc;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open", path, errno);
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) fail("cannot read", path, errno);
  return content.str();
}

DurableFileWriter::DurableFileWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create", path_, errno);
  crc32_ = static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0));
}

DurableFileWriter::~DurableFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFileWriter::write(const void* data, std::size_t size) {
  if (fd_ < 0) throw Error("cannot write " + path_ + ": already closed");
  crc32_ = crc32_update(crc32_, data, size);
  bytes_ += size;
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = ::write(fd_, bytes, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", path_, errno);
    }
    bytes += written;
    size -= static_cast<std::size_t>(written);
  }
}

void DurableFileWriter::finish() {
  if (fd_ < 0) throw Error("cannot finish " + path_ + ": already closed");
  if (::fsync(fd_) != 0) fail("cannot fsync", path_, errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", path_, errno);
}

}  // namespace baton
