#pragma once
// A file the logger destinations append to (POSIX, so a failure can say why: a full disk, a read-only file
// system): every write goes out whole before the next, and each error is a baton::Error naming the file.
// Header-only; compiled into each plugin that uses it.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "baton/error.h"

namespace baton_plugins {

class AppendFile {
 public:
  /// `what` heads every error ("csv logger").
  explicit AppendFile(std::string what) : what_(std::move(what)) {}
  ~AppendFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  /// Opens `path` for appending; `create_new` creates it and fails when it exists, otherwise it must exist.
  void open(const std::string& path, bool create_new) {
    close_quietly();
    path_ = path;
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | (create_new ? O_CREAT | O_EXCL : 0), 0644);
    if (fd_ < 0) fail(std::string(create_new ? "cannot create it: " : "cannot open it for appending: ") +
                      std::strerror(errno));
  }

  void append(std::string_view text) {
    if (fd_ < 0) fail("it is not open");
    const char* data = text.data();
    std::size_t left = text.size();
    while (left > 0) {
      const ssize_t written = ::write(fd_, data, left);
      if (written < 0 && errno == EINTR) continue;
      if (written < 0) fail(std::string("write failed: ") + std::strerror(errno));
      data += written;
      left -= static_cast<std::size_t>(written);
    }
  }

  /// Closes it; a failure (an earlier write's error reported late) is an error.
  void close() {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0) fail(std::string("cannot close it: ") + std::strerror(errno));
  }
  void close_quietly() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  const std::string& path() const { return path_; }
  [[noreturn]] void fail(const std::string& reason) const {
    throw baton::Error(what_ + ": file '" + path_ + "': " + reason);
  }

 private:
  std::string what_;
  std::string path_;
  int fd_ = -1;
};

}  // namespace baton_plugins
