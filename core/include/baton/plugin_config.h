#pragma once
// A plugin's own keys from its [[plugins]] table, with types checked. Every error names the plugin, the key, the
// file and the line. After the plugin is created, any key it never read is reported as an unknown key, so a typo
// in a config never passes silently.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "baton/error.h"
#include "baton/export.h"
#include "baton/time.h"

namespace baton {

class BATON_API PluginConfig {
 public:
  /// An empty configuration (for plugins created from code).
  PluginConfig();
  ~PluginConfig();
  PluginConfig(const PluginConfig&);
  PluginConfig& operator=(const PluginConfig&);

  /// Parses a TOML table text, e.g. "threshold = 3" (handy in tests and for plugins created from code).
  static PluginConfig from_toml(std::string_view toml_text, std::string plugin_name = "plugin",
                                std::string file = "<string>");

  const std::string& plugin_name() const;
  bool has(std::string_view key) const;
  /// Supported T: bool, int, std::int64_t, double (an integer is accepted), std::string, Time (a time string),
  /// std::vector<std::string>, std::vector<double>, std::vector<std::int64_t>, PluginConfig (an inline table).
  /// Throws ConfigError when the key is missing or holds another type.
  template <class T>
  T get(std::string_view key) const;
  template <class T>
  T get_or(std::string_view key, T fallback) const {
    return has(key) ? get<T>(key) : fallback;
  }
  /// Keys in file order.
  std::vector<std::string> keys() const;
  /// Keys (dotted paths, nested tables included) that get/has never touched.
  std::vector<std::string> unread_keys() const;
  /// Throws ConfigError for the first unread key ("unknown key ... for plugin ...").
  void reject_unread() const;
  /// Where key is (or, when absent, where the plugin's table is).
  SourceLocation where(std::string_view key) const;
  /// Throws ConfigError at key's location: "<plugin>.<key>: <message>".
  [[noreturn]] void fail(std::string_view key, std::string_view message) const;

  struct Impl;
  explicit PluginConfig(std::shared_ptr<Impl> impl);

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace baton
