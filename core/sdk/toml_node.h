#pragma once
// Private to core/config: reading toml++ nodes into C++ values with messages that say what was expected and what
// was found (toml_node.cpp), and writing them as text (toml_text.cpp), shared by the run configuration (config*.cpp)
// and plugins' views (plugin_config.cpp).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "baton/error.h"
#include "baton/plugin_config.h"
#include "baton/time.h"

namespace baton::toml_detail {

/// A node that does not hold what was asked for. `suffix` names an array element ("[2]") when the culprit is one.
struct Mismatch {
  const toml::node* node;
  std::string suffix;
  std::string message;  // "expected an integer, got string \"x\""
};

/// Text as a TOML basic string: "a\"b".
std::string quote(std::string_view text);

/// "string \"abc\"", "integer 3", "float 0.5", "boolean true", "array [1, 2]", "table".
std::string describe(const toml::node& node);

/// The shortest decimal that reads back as the same double ("0.05", not toml++'s "0.050000000000000003"), with
/// ".0" on a whole number so it stays a float; nan, inf and -inf as TOML spells them.
std::string float_text(double value);

/// A value as TOML writes it: strings quoted, floats as float_text, arrays and tables inline
/// ("[\"accuracy\", { k = 3, name = \"top_k\" }]").
std::string value_text(const toml::node& node);

/// A whole document that reads back as `root`: its values, then each table under its [header] and each array of
/// tables under [[header]]s, keys in sorted order (toml++'s), floats as float_text.
std::string document_text(const toml::table& root);

/// Where a node came from. Nodes from a --set override carry the override's text as their path and have no line.
SourceLocation location_of(const toml::source_region& source, const std::string& file);
inline SourceLocation location_of(const toml::node& node, const std::string& file) {
  return location_of(node.source(), file);
}

/// Converters; each throws Mismatch. Integers are accepted where a float is expected, never the reverse.
bool to_bool(const toml::node& node);
std::int64_t to_int(const toml::node& node);
int to_int32(const toml::node& node);
double to_double(const toml::node& node);
std::string to_string(const toml::node& node);
Time to_time(const toml::node& node);
std::vector<std::string> to_strings(const toml::node& node);
std::vector<double> to_doubles(const toml::node& node);
std::vector<std::int64_t> to_ints(const toml::node& node);

/// Parses TOML text; a syntax error becomes a ConfigError at the error's line and column.
toml::table parse_table(std::string_view text, const std::string& file);

/// A plugin's view over its table (moved in, so every node keeps its source location).
PluginConfig make_plugin_config(toml::table table, std::string plugin_name, std::string file, SourceLocation where);
/// A view of a run-config section ([trainer], [optimizer], ...): errors name keys "<section>.<key>" and unknown keys
/// "for [<section>]" (owned_by changes the latter to the component that reads it).
PluginConfig make_section_config(toml::table table, const std::string& section, std::string file,
                                 SourceLocation where);

}  // namespace baton::toml_detail
