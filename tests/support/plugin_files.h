#pragma once
// Where the build puts a built-in plugin: baton_add_plugin writes <BATON_PLUGIN_DIR>/<name>.so (the plugin tests
// get BATON_PLUGIN_DIR, the build's lib/baton/plugins).
#include <string>

namespace baton::test {

inline std::string plugin_file(const std::string& name) { return std::string(BATON_PLUGIN_DIR) + "/" + name + ".so"; }

}  // namespace baton::test
