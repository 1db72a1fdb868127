#include "ema_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "baton/error.h"

namespace fs = std::filesystem;

namespace baton::ema_plugin {
namespace {

// A sibling name that no real file uses (the checkpoint store's convention: hidden, with the process id).
fs::path temporary_sibling(const fs::path& target, const char* kind) {
  return target.parent_path() / ("." + std::string(kind) + "-" + target.filename().string() + "-" +
                                 std::to_string(::getpid()));
}

void link_or_copy_file(const fs::path& source, const fs::path& target) {
  std::error_code ec;
  fs::create_hard_link(source, target, ec);
  if (!ec) return;
  fs::copy_file(source, target, fs::copy_options::overwrite_existing);
  sync_path(target);
}

// rename() between two names of one file does nothing and leaves the source name behind.
void rename_into_place(const fs::path& temporary, const fs::path& target) {
  fs::rename(temporary, target);
  std::error_code ec;
  if (fs::exists(temporary, ec)) fs::remove(temporary, ec);
  sync_path(target.parent_path());
}

}  // namespace

void sync_path(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path.string() + " to sync it: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (rc != 0) throw Error("cannot sync " + path.string() + ": " + std::strerror(saved));
}

void write_tensors_atomically(const fs::path& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  fs::create_directories(path.parent_path());
  fs::path temporary = temporary_sibling(path, "tmp");
  write_safetensors(temporary.string(), tensors, metadata);
  rename_into_place(temporary, path);
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  fs::path temporary = temporary_sibling(path, "tmp");
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw Error("cannot write " + temporary.string());
  }
  sync_path(temporary);
  rename_into_place(temporary, path);
}

void link_or_copy_atomically(const fs::path& source, const fs::path& target) {
  std::error_code ec;
  if (fs::exists(target, ec) && fs::equivalent(source, target, ec)) return;
  fs::path temporary = temporary_sibling(target, "tmp");
  fs::remove(temporary, ec);
  link_or_copy_file(source, temporary);
  rename_into_place(temporary, target);
}

void copy_folder_atomically(const fs::path& source, const fs::path& target) {
  if (!fs::is_directory(source)) throw Error("cannot copy " + source.string() + ": no such folder");
  fs::path temporary = temporary_sibling(target, "tmp");
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  for (const auto& entry : fs::recursive_directory_iterator(source)) {
    fs::path relative = fs::relative(entry.path(), source);
    if (entry.is_directory())
      fs::create_directories(temporary / relative);
    else if (entry.is_regular_file())
      link_or_copy_file(entry.path(), temporary / relative);
  }
  sync_path(temporary);
  // An existing target is moved aside first: the real name always holds one complete copy.
  fs::path old = temporary_sibling(target, "old");
  bool replacing = fs::exists(target);
  if (replacing) {
    fs::remove_all(old);
    fs::rename(target, old);
  }
  fs::rename(temporary, target);
  sync_path(target.parent_path());
  if (replacing) fs::remove_all(old);
}

}  // namespace baton::ema_plugin
