// TOML nodes as text: in messages (describe) and in the stored configuration (document_text), which writes each
// float as the shortest decimal that reads back as the same double, as a user writes it, where toml++'s printer
// (built without <charconv> floats) writes 17 digits: 0.05 as 0.050000000000000003.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "baton/text.h"
#include "sdk/toml_node.h"

namespace baton::toml_detail {
namespace {

const char* type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    case toml::node_type::array: return "array";
    case toml::node_type::table: return "table";
    case toml::node_type::none: break;
  }
  return "nothing";
}

// A bare key when TOML allows one (A-Z a-z 0-9 _ -), else a quoted one.
std::string key_text(std::string_view key) {
  const bool bare = !key.empty() && key.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                          "0123456789_-") == std::string_view::npos;
  return bare ? std::string(key) : quote(key);
}

// `whole_tables`: a table inside the value is written out ({ k = 3, name = "top_k" }) rather than as "{...}".
std::string value_text(const toml::node& node, bool whole_tables) {
  if (const auto* v = node.as_string()) return quote(v->get());
  if (const auto* v = node.as_floating_point()) return float_text(v->get());
  if (const auto* v = node.as_integer()) return std::to_string(v->get());
  if (const auto* v = node.as_boolean()) return v->get() ? "true" : "false";
  if (const auto* array = node.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < array->size(); ++i)
      out += (i == 0 ? "" : ", ") + value_text((*array)[i], whole_tables);
    return out + "]";
  }
  if (const auto* table = node.as_table()) {
    if (!whole_tables) return "{...}";
    if (table->empty()) return "{}";
    std::string out = "{ ";
    bool first = true;
    for (const auto& [key, value] : *table) {
      out += (first ? "" : ", ") + key_text(key.str()) + " = " + value_text(value, true);
      first = false;
    }
    return out + " }";
  }
  std::ostringstream text;  // dates and times print as TOML writes them
  node.visit([&](const auto& concrete) { text << concrete; });
  return text.str();
}

// An array written as [[header]] tables: every element a table that was not written inline in the file.
bool is_table_array(const toml::node& node) {
  const toml::array* array = node.as_array();
  if (array == nullptr || array->empty()) return false;
  for (const toml::node& element : *array)
    if (!element.is_table() || element.as_table()->is_inline()) return false;
  return true;
}

// A table written under its own [header] rather than as key = { ... }.
bool is_section(const toml::node& node) { return node.is_table() && !node.as_table()->is_inline(); }

// `table`'s keys (its values first, then its tables, then its arrays of tables, as toml++ orders them), each
// section headed by its dotted path.
void write_table(std::string& out, const toml::table& table, const std::string& path) {
  for (const auto& [key, node] : table)
    if (!is_section(node) && !is_table_array(node))
      out += key_text(key.str()) + " = " + value_text(node, true) + "\n";
  for (const auto& [key, node] : table) {
    if (!is_section(node)) continue;
    const std::string header = path + key_text(key.str());
    out += (out.empty() ? "[" : "\n[") + header + "]\n";
    write_table(out, *node.as_table(), header + ".");
  }
  for (const auto& [key, node] : table) {
    if (!is_table_array(node)) continue;
    const std::string header = path + key_text(key.str());
    for (const toml::node& element : *node.as_array()) {
      out += (out.empty() ? "[[" : "\n[[") + header + "]]\n";
      write_table(out, *element.as_table(), header + ".");
    }
  }
}

}  // namespace

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// %g with the fewest digits that read back (0.0001 rather than the 1e-04 std::to_chars would pick by length); a
// float that reads as a whole number keeps ".0", so it stays a float when read back.
std::string float_text(double value) {
  std::string out = format_exact(value);
  if (out.find_first_of(".en") == std::string::npos) out += ".0";
  return out;
}

std::string value_text(const toml::node& node) { return value_text(node, true); }

std::string describe(const toml::node& node) {
  if (node.is_table()) return "table";
  std::string shown = value_text(node, false);
  // Long arrays would drown the message; the start is enough to recognise the value.
  constexpr std::size_t kMaxShown = 60;
  if (shown.size() > kMaxShown) shown = shown.substr(0, kMaxShown) + "...";
  return std::string(type_name(node.type())) + " " + shown;
}

std::string document_text(const toml::table& root) {
  std::string out;
  write_table(out, root, "");
  return out;
}

}  // namespace baton::toml_detail
