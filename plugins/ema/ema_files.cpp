#include "ema_files.h"

#include <unistd.h>

#include <string>

#include "baton/durable_file.h"
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
  fsync_path(target.string());
}

}  // namespace

void link_or_copy_atomically(const fs::path& source, const fs::path& target) {
  std::error_code ec;
  if (fs::exists(target, ec) && fs::equivalent(source, target, ec)) return;
  fs::path temporary = temporary_sibling(target, "tmp");
  fs::remove(temporary, ec);
  link_or_copy_file(source, temporary);
  rename_durably(temporary.string(), target.string());
  // rename() between two names of one file does nothing and leaves the temporary name behind.
  fs::remove(temporary, ec);
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
  fsync_path(temporary.string());
  // An existing target is moved aside first: the real name always holds one complete copy.
  fs::path old = temporary_sibling(target, "old");
  bool replacing = fs::exists(target);
  if (replacing) {
    fs::remove_all(old);
    fs::rename(target, old);
  }
  rename_durably(temporary.string(), target.string());
  if (replacing) fs::remove_all(old);
}

}  // namespace baton::ema_plugin
