#include "baton/plugin_loader.h"

#include <dlfcn.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <utility>

#include <boost/dll/shared_library.hpp>
#include <torch/version.h>

#include "baton/components.h"
#include "sdk/nearest.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using Library = boost::dll::shared_library;

constexpr const char* kInsecureOverride =
    "set [plugin_search] allow_insecure = true or pass --allow-insecure-plugins to load it anyway";

std::string kind_name(int kind) {
  switch (kind) {
    case BATON_PLUGIN_ALGORITHM:
      return "algorithm";
    case BATON_PLUGIN_CALLBACK:
      return "callback";
    case BATON_PLUGIN_COMPONENTS:
      return "components";
    default:
      return "";
  }
}

std::string or_empty(const char* text) { return text ? text : ""; }

// "1.13.1" -> "1.13": plugins built against another patch release of LibTorch share its ABI, other minors do not.
std::string major_minor(const std::string& version) {
  auto first = version.find('.');
  if (first == std::string::npos) return version;
  auto second = version.find('.', first + 1);
  return second == std::string::npos ? version : version.substr(0, second);
}

std::string user_label(uid_t uid) {
  const passwd* entry = getpwuid(uid);
  std::string id = "uid " + std::to_string(uid);
  return entry ? std::string(entry->pw_name) + " (" + id + ")" : id;
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Loading a library runs its code with our privileges, so the file and the folder it sits in must not be
// replaceable by anyone but us (or root). `what` is "file" or "folder" for the message; `plugin_path` names the
// plugin as the user gave it (and what it links to).
void check_not_tampered(const fs::path& target, const std::string& what, const std::string& plugin_path) {
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0)
    throw PluginError("cannot check " + target.string() + " for " + plugin_path + ": " +
                      std::generic_category().message(errno));
  // Group write is tolerated only for our own primary group: with user-private groups and umask 002 (a common
  // setup) every file a user builds is group-writable, yet nobody else is in that group.
  bool writable_by_others = (st.st_mode & S_IWOTH) != 0;
  bool writable_by_foreign_group = (st.st_mode & S_IWGRP) != 0 && st.st_gid != getegid();
  if (writable_by_others || writable_by_foreign_group)
    throw PluginError("refusing to load " + plugin_path + ": its " + what + " " + target.string() +
                      " is writable by " + (writable_by_others ? "others" : "another group") + " (mode " +
                      octal_mode(st.st_mode) + "); remove that permission (chmod go-w) or " + kInsecureOverride);
  if (st.st_uid != 0 && st.st_uid != geteuid())
    throw PluginError("refusing to load " + plugin_path + ": its " + what + " " + target.string() +
                      " is owned by " + user_label(st.st_uid) + ", neither you nor root; " + kInsecureOverride);
}

// A loaded library with its info struct; the strings in `raw` point into the library, `info` holds copies.
struct OpenedPlugin {
  std::shared_ptr<Library> library;
  const baton_plugin_info* raw = nullptr;
  PluginInfo info;
};

// The dynamic loader's reason for a file that is not ELF depends on its size ("file too short" under 64 bytes,
// "invalid ELF header" above); checking the magic number first gives every such file the same message.
void require_elf(const std::string& path) {
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(magic, sizeof magic);
  if (in.gcount() != static_cast<std::streamsize>(sizeof magic) || std::memcmp(magic, "\x7f" "ELF", 4) != 0)
    throw PluginError("cannot load " + path + ": " + path + ": invalid ELF header (not a shared library)");
}

std::shared_ptr<Library> open_library(const std::string& path) {
  boost::dll::fs::error_code ec;
  std::shared_ptr<Library> library;
  try {
    dlerror();  // clears a stale message so the one read below belongs to this dlopen
    library = std::make_shared<Library>(path, ec, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    throw PluginError("cannot load " + path + ": " + e.what());
  }
  if (ec || !library->is_loaded()) {
    // dlerror() carries the useful reason (bad ELF header, missing dependency, undefined symbol); Boost's own
    // error code only says "bad file descriptor".
    const char* reason = dlerror();
    throw PluginError("cannot load " + path + ": " + (reason ? std::string(reason) : ec.message()));
  }
  return library;
}

const baton_plugin_info* read_entry(Library& library, const std::string& path) {
  if (!library.has(BATON_PLUGIN_ENTRY_NAME))
    throw PluginError(path + " is not a baton plugin: it exports no " BATON_PLUGIN_ENTRY_NAME);
  const baton_plugin_info* raw = nullptr;
  try {
    raw = library.get<const baton_plugin_info*()>(BATON_PLUGIN_ENTRY_NAME)();
  } catch (const std::exception& e) {
    throw PluginError(path + ": " BATON_PLUGIN_ENTRY_NAME " failed: " + e.what());
  } catch (...) {
    throw PluginError(path + ": " BATON_PLUGIN_ENTRY_NAME " failed: it threw something that is not a std::exception");
  }
  if (!raw) throw PluginError(path + ": " BATON_PLUGIN_ENTRY_NAME " returned no plugin info (a null pointer)");
  return raw;
}

// ABI 4's struct, as first released, ends with register_components: the fields up to there are always present. A
// field appended later is read only when struct_size covers it.
constexpr std::size_t kAbi4InfoSize =
    offsetof(baton_plugin_info, register_components) + sizeof(baton_plugin_info::register_components);

// Checks in the order the fields can be trusted: the size and ABI version first (their offsets never change),
// then the fields whose meaning depends on them.
void check_info(const baton_plugin_info& raw, const std::string& path) {
  constexpr std::size_t kHeader = offsetof(baton_plugin_info, abi_version) + sizeof(raw.abi_version);
  if (raw.struct_size < kHeader)
    throw PluginError(path + ": plugin info struct too small (" + std::to_string(raw.struct_size) +
                      " bytes, expected " + std::to_string(sizeof(baton_plugin_info)) + ")");
  if (raw.abi_version != BATON_PLUGIN_ABI_VERSION)
    throw PluginError(path + ": plugin ABI version mismatch: got " + std::to_string(raw.abi_version) +
                      ", supported " + std::to_string(BATON_PLUGIN_ABI_VERSION) +
                      " (rebuild the plugin against this baton's SDK)");
  if (raw.struct_size < kAbi4InfoSize)
    throw PluginError(path + ": plugin info struct too small (" + std::to_string(raw.struct_size) +
                      " bytes, expected at least " + std::to_string(kAbi4InfoSize) + ")");
  if (!raw.name || !*raw.name) throw PluginError(path + ": the plugin info has no name");

  const std::string torch = or_empty(raw.torch_version);
  if (major_minor(torch) != major_minor(TORCH_VERSION))
    throw PluginError(path + ": built against LibTorch " + (torch.empty() ? "(unknown)" : torch) +
                      ", this baton uses " + TORCH_VERSION + " (rebuild the plugin against LibTorch " +
                      major_minor(TORCH_VERSION) + ")");
  if (raw.cxx11_abi != BATON_CXX11_ABI_VALUE)
    throw PluginError(path + ": C++ ABI mismatch: built with _GLIBCXX_USE_CXX11_ABI=" +
                      std::to_string(raw.cxx11_abi) + ", this baton uses _GLIBCXX_USE_CXX11_ABI=" +
                      std::to_string(BATON_CXX11_ABI_VALUE) +
                      " (compile the plugin with LibTorch's flags, TORCH_CXX_FLAGS; baton_add_plugin does)");
  if (kind_name(raw.kind).empty())
    throw PluginError(path + ": invalid plugin kind " + std::to_string(raw.kind) + " (expected " +
                      std::to_string(BATON_PLUGIN_ALGORITHM) + " for an algorithm or " +
                      std::to_string(BATON_PLUGIN_CALLBACK) + " for a callback, " +
                      std::to_string(BATON_PLUGIN_COMPONENTS) + " for a components library)");
  if (raw.kind == BATON_PLUGIN_COMPONENTS) {
    if (!raw.register_components)
      throw PluginError(path + ": components library '" + raw.name + "' has no register_components function (null)");
  } else if (!raw.create) {
    throw PluginError(path + ": plugin '" + raw.name + "' has no create function (null)");
  }
}

PluginInfo copy_info(const baton_plugin_info& raw, const std::string& path) {
  PluginInfo info;
  info.path = path;
  info.name = or_empty(raw.name);
  info.version = or_empty(raw.version);
  info.description = or_empty(raw.description);
  info.torch_version = or_empty(raw.torch_version);
  info.cxx11_abi = raw.cxx11_abi;
  info.abi_version = raw.abi_version;
  info.kind = kind_name(raw.kind);
  return info;
}

OpenedPlugin open_plugin(const std::string& given, const LoaderOptions& options) {
  std::error_code ec;
  if (!fs::exists(given, ec)) throw PluginError("plugin file not found: " + given);
  if (!fs::is_regular_file(given, ec)) throw PluginError("cannot load " + given + ": not a regular file");
  // The real file, so that a symlink cannot point the security checks at something other than what is loaded.
  const fs::path real = fs::canonical(given, ec);
  if (ec) throw PluginError("plugin file not found: " + given + " (" + ec.message() + ")");
  const std::string path = real.string();
  if (!options.allow_insecure) {
    // Through a symlink the checks are about the target; the message names both, so the config's path is found.
    const std::string named = fs::path(given) == real ? path : given + " (a link to " + path + ")";
    check_not_tampered(real, "file", named);
    check_not_tampered(real.parent_path(), "folder", named);
  }
  require_elf(path);
  OpenedPlugin opened;
  opened.library = open_library(path);
  opened.raw = read_entry(*opened.library, path);
  check_info(*opened.raw, path);
  opened.info = copy_info(*opened.raw, path);
  return opened;
}

// Deletes the plugin object, then lets go of the library: the object's destructor is code inside the library,
// so the library must stay mapped until it has run. Releasing explicitly (rather than when the control block
// goes) unloads it as soon as the last object is gone, even if weak_ptrs to the plugin remain.
struct PluginDeleter {
  std::shared_ptr<Library> library;
  void operator()(Plugin* plugin) {
    delete plugin;  // through Plugin's virtual destructor: the derived part's destructor is in the library
    library.reset();
  }
};

std::shared_ptr<Plugin> create_object(const OpenedPlugin& opened, const PluginConfig& config) {
  const std::string& name = opened.info.name;
  const std::string& path = opened.info.path;
  Plugin* raw = nullptr;
  try {
    raw = opened.raw->create(config);
  } catch (const ConfigError& e) {
    // Rethrown as a copy made here: the caught object may be of a type from the plugin, and the library can be
    // unloaded while this exception propagates. The message (file, line, key) stays the same.
    throw ConfigError(e);
  } catch (const std::exception& e) {
    throw PluginError("plugin '" + name + "' (" + path + ") failed to start: " + e.what());
  } catch (...) {
    throw PluginError("plugin '" + name + "' (" + path + ") failed to start: it threw something that is not a std::exception");
  }
  if (!raw) throw PluginError("plugin '" + name + "' (" + path + "): create() returned no object (null)");
  return std::shared_ptr<Plugin>(raw, PluginDeleter{opened.library});
}

// Runs a library's registration function once per file, with the registries stamping what it adds with the file,
// its version and a handle that keeps the library loaded as long as its factories may be called.
void register_once(const OpenedPlugin& opened) {
  const auto registration = opened.raw->register_components;
  if (!registration) return;
  static std::mutex mutex;
  static std::set<std::string> registered;
  std::lock_guard<std::mutex> lock(mutex);
  if (!registered.insert(opened.info.path).second) return;
  const std::string where = "plugin '" + opened.info.name + "' (" + opened.info.path + ")";
  try {
    Components& registries = components();  // built (with the built-ins) before the library's origin is set
    ComponentOriginScope scope(ComponentOrigin{opened.info.path, opened.info.version, opened.library});
    registration(registries);
  } catch (const std::exception& e) {
    throw PluginError(where + " failed to register its components: " + e.what());
  } catch (...) {
    throw PluginError(where + " failed to register its components: it threw something that is not a std::exception");
  }
}

std::vector<std::string> split_path_list(const char* list) {
  std::vector<std::string> out;
  if (!list) return out;
  std::string text(list);
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(':', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));  // "a::b" and a trailing ':' add nothing
    start = end + 1;
  }
  return out;
}

// The *.so files directly in dir, by file name (a missing or unreadable folder has none).
std::vector<fs::path> plugin_files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->path().extension() == ".so" && it->is_regular_file(type_ec)) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The messages of inspect() name the file (as given, or resolved through symlinks); prefix it where they do not.
std::string name_file(const std::string& message, const fs::path& file) {
  std::error_code ec;
  const std::string real = fs::canonical(file, ec).string();
  const bool named = message.find(file.string()) != std::string::npos ||
                     (!ec && message.find(real) != std::string::npos);
  return named ? message : file.string() + ": " + message;
}

}  // namespace

PluginLoader::PluginLoader(LoaderOptions options) : options_(std::move(options)) {}

std::vector<std::string> PluginLoader::search_paths() const {
  std::vector<std::string> candidates;
  std::error_code ec;
  const fs::path builtin = (fs::path(executable_dir()) / ".." / "lib" / "baton" / "plugins").lexically_normal();
  if (fs::is_directory(builtin, ec)) candidates.push_back(builtin.string());
  for (auto& dir : split_path_list(std::getenv("BATON_PLUGIN_PATH"))) candidates.push_back(dir);
  for (auto& dir : options_.search_paths) candidates.push_back(dir);

  // A folder listed twice would make every plugin in it look like its own duplicate in discover().
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (auto& dir : candidates) {
    fs::path key = fs::absolute(dir, ec).lexically_normal();
    if (!key.has_filename()) key = key.parent_path();  // "/a/" and "/a" are one folder
    if (seen.insert(key.string()).second) out.push_back(dir);
  }
  return out;
}

std::string PluginLoader::resolve(const std::string& name) const {
  const auto dirs = search_paths();
  std::error_code ec;
  for (auto& dir : dirs) {
    const fs::path candidate = fs::path(dir) / (name + ".so");
    if (fs::is_regular_file(candidate, ec)) return fs::absolute(candidate, ec).lexically_normal().string();
  }
  std::string searched;
  for (auto& dir : dirs) searched += "\n  " + dir;
  if (searched.empty()) searched = " (none: no built-in plugin folder, BATON_PLUGIN_PATH and [plugin_search] empty)";
  // The names that are there (file names only: nothing is loaded for a message), the closest first.
  std::vector<std::string> names;
  for (auto& dir : dirs)
    for (auto& file : plugin_files_in(dir)) names.push_back(file.stem().string());
  throw PluginError("plugin '" + name + "' not found" + detail::did_you_mean(name, names) + ": no " + name +
                    ".so in the plugin search path ('baton plugins' lists the plugins there); searched:" + searched);
}

PluginInfo PluginLoader::inspect(const std::string& path) const { return open_plugin(path, options_).info; }

void PluginLoader::register_components(const std::string& path) const { register_once(open_plugin(path, options_)); }

LoadedPlugin PluginLoader::load(const std::string& path, const PluginConfig& config) const {
  OpenedPlugin opened = open_plugin(path, options_);
  // A plugin given by path is known to the config only by its file; its errors should name the plugin.
  const PluginConfig named =
      config.plugin_name() == opened.info.name ? config : config.renamed(opened.info.name);
  register_once(opened);
  LoadedPlugin loaded;
  if (opened.info.kind == "components") {
    // Nothing to create: the library's components are in the registries now. It reads no keys, so any key in its
    // [[plugins]] table is reported as unknown.
    loaded.info = std::move(opened.info);
    loaded.id = loaded.info.name;
    named.reject_unread();
    return loaded;
  }
  loaded.plugin = create_object(opened, named);
  loaded.info = std::move(opened.info);
  loaded.id = loaded.info.name;
  const std::string where = "plugin '" + loaded.info.name + "' (" + loaded.info.path + ")";
  if (loaded.info.kind == "algorithm") {
    loaded.algorithm = dynamic_cast<Algorithm*>(loaded.plugin.get());
    if (!loaded.algorithm) throw PluginError(where + " declares itself an algorithm but is not a baton::Algorithm");
  } else {
    loaded.callback = dynamic_cast<Callback*>(loaded.plugin.get());
    if (!loaded.callback) throw PluginError(where + " declares itself a callback but is not a baton::Callback");
  }
  // After the constructor, so the keys it read count as read; a typo in the config is an error, not a default.
  named.reject_unread();
  return loaded;
}

std::vector<PluginInfo> PluginLoader::discover(std::vector<std::string>* errors) const {
  std::vector<PluginInfo> found;
  std::map<std::string, std::string> first_by_name;  // plugin name -> the file that wins, as in resolve()
  auto report = [&](std::string message) {
    if (errors) errors->push_back(std::move(message));
  };
  for (auto& dir : search_paths()) {
    for (auto& file : plugin_files_in(dir)) {
      const std::string path = file.string();
      PluginInfo info;
      try {
        info = inspect(path);
      } catch (const std::exception& e) {
        report(name_file(e.what(), file));
        continue;
      }
      auto [it, inserted] = first_by_name.emplace(info.name, info.path);
      if (!inserted) {
        report(info.path + ": duplicate plugin '" + info.name + "', ignored; " + it->second +
               " comes first in the search path");
        continue;
      }
      found.push_back(std::move(info));
    }
  }
  std::sort(found.begin(), found.end(), [](const PluginInfo& a, const PluginInfo& b) { return a.name < b.name; });
  return found;
}

std::string executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw PluginError("cannot find the running executable (/proc/self/exe): " + ec.message());
  return exe.parent_path().string();
}

}  // namespace baton
