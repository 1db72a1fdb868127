#pragma once
// Finding and loading plugins (Boost.DLL). A plugin file exports one C function, baton_plugin_entry, returning a
// baton_plugin_info; the loader reads that struct before touching any C++ type of the plugin and refuses the file
// with a distinct error for each way it can be wrong. The library handle is owned by every object made from it
// (the plugin's deleter holds it), so the library outlives its objects.
//
// Ownership: LoadedPlugin::plugin's deleter deletes the object (through Plugin's virtual destructor, whose
// derived part is code in the library) and only then releases its shared_ptr to the library. The library is
// therefore unloaded when the last object made from it is gone, not when the loader or the LoadedPlugin is.
//
// Naming: resolve() finds a plugin by its file name, so a plugin called "ema" must be in a file "ema.so"
// (baton_add_plugin names it so). The loader records the name from the info struct and the file separately and
// does not require them to agree when a plugin is loaded by path.
//
// Security: loading a library runs its code, so a file, or the folder holding it, that is writable by group or
// others, or owned by a user other than the current one or root, is refused unless LoaderOptions::allow_insecure
// ([plugin_search] allow_insecure = true, or --allow-insecure-plugins).
#include <memory>
#include <string>
#include <vector>

#include "baton/plugin.h"

#include "baton/export.h"

namespace baton {

struct BATON_API PluginInfo {
  std::string path;  // the file, absolute
  std::string name;
  std::string version;
  std::string description;
  std::string torch_version;
  int cxx11_abi = -1;
  unsigned abi_version = 0;
  std::string kind;  // "algorithm" | "callback" | "components"
};

struct BATON_API LoadedPlugin {
  PluginInfo info;
  std::string id;                  // unique within a run: the name, or "<name>#<n>" for a repeated plugin
                                   // (load() sets the name; whoever loads several copies numbers them)
  std::shared_ptr<Plugin> plugin;  // its deleter keeps the library loaded; null for a components library
  Algorithm* algorithm = nullptr;  // exactly one of these two is set, unless it is a components library
  Callback* callback = nullptr;
};

struct BATON_API LoaderOptions {
  std::vector<std::string> search_paths;  // searched in order after the built-in folder and BATON_PLUGIN_PATH
  bool allow_insecure = false;            // accept plugin files/folders writable by group or others
};

class BATON_API PluginLoader {
 public:
  explicit PluginLoader(LoaderOptions options = {});

  /// The built-in plugin folder (<executable folder>/../lib/baton/plugins), then each BATON_PLUGIN_PATH entry
  /// (colon-separated), then options.search_paths.
  std::vector<std::string> search_paths() const;

  /// The file of a plugin given by name ("<dir>/<name>.so" in the search path). Throws PluginError listing
  /// the folders searched.
  std::string resolve(const std::string& name) const;

  /// Loads the library (RTLD_NOW) and reads its info struct, without creating anything. Throws PluginError:
  ///   file missing; not a shared library (with the loader's reason); entry point baton_plugin_entry missing;
  ///   ABI version mismatch ("got X, supported Y"); LibTorch version mismatch (major.minor); C++ ABI mismatch;
  ///   writable by others (unless allowed).
  PluginInfo inspect(const std::string& path) const;

  /// inspect() + register the library's components (baton/components.h; once per file) + create the plugin from
  /// its config + reject keys the plugin never read. A factory that throws becomes a PluginError naming the
  /// plugin; a ConfigError from the factory passes through unchanged. A components library creates nothing
  /// (`plugin` stays null) and takes no keys.
  LoadedPlugin load(const std::string& path, const PluginConfig& config) const;

  /// Opens the library (with inspect()'s checks) and registers its components, once per file; a library without
  /// any is left alone. `baton plugins` uses it to list every component.
  void register_components(const std::string& path) const;

  /// Every loadable plugin file in the search path (for `baton plugins`); files that fail to load are returned
  /// with their error in `errors` ("<path>: <reason>").
  std::vector<PluginInfo> discover(std::vector<std::string>* errors = nullptr) const;

 private:
  LoaderOptions options_;
};

/// The folder of the running executable (from /proc/self/exe).
BATON_API std::string executable_dir();

}  // namespace baton
