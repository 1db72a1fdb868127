// Reading toml++ nodes into C++ values, with messages that say what was expected and what was found.
#include <cmath>
#include <limits>

#include "sdk/toml_node.h"

namespace baton::toml_detail {
namespace {

[[noreturn]] void mismatch(const toml::node& node, std::string_view expected) {
  throw Mismatch{&node, "", "expected " + std::string(expected) + ", got " + describe(node)};
}

template <class T, class Element>
std::vector<T> to_vector(const toml::node& node, std::string_view expected, Element element) {
  const toml::array* array = node.as_array();
  if (array == nullptr) mismatch(node, expected);
  std::vector<T> out;
  out.reserve(array->size());
  for (std::size_t i = 0; i < array->size(); ++i) {
    try {
      out.push_back(element((*array)[i]));
    } catch (Mismatch& m) {
      m.suffix = "[" + std::to_string(i) + "]" + m.suffix;
      throw;
    }
  }
  return out;
}

}  // namespace

SourceLocation location_of(const toml::source_region& source, const std::string& file) {
  if (source.path && *source.path != file) return SourceLocation{*source.path, 0, 0};
  return SourceLocation{file, static_cast<int>(source.begin.line), static_cast<int>(source.begin.column)};
}

bool to_bool(const toml::node& node) {
  if (const auto* v = node.as_boolean()) return v->get();
  mismatch(node, "a boolean");
}

std::int64_t to_int(const toml::node& node) {
  if (const auto* v = node.as_integer()) return v->get();
  mismatch(node, "an integer");
}

int to_int32(const toml::node& node) {
  const std::int64_t value = to_int(node);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max())
    mismatch(node, "an integer in [-2147483648, 2147483647]");
  return static_cast<int>(value);
}

double to_double(const toml::node& node) {
  double value = 0;
  if (const auto* f = node.as_floating_point())
    value = f->get();
  else if (const auto* i = node.as_integer())
    value = static_cast<double>(i->get());
  else
    mismatch(node, "a number");
  if (!std::isfinite(value)) mismatch(node, "a finite number");
  return value;
}

std::string to_string(const toml::node& node) {
  if (const auto* v = node.as_string()) return v->get();
  mismatch(node, "a string");
}

Time to_time(const toml::node& node) {
  const auto* v = node.as_string();
  if (v == nullptr) mismatch(node, "a time string such as \"2ep\"");
  try {
    return Time::parse(v->get());
  } catch (const TimeError& e) {
    throw Mismatch{&node, "", e.what()};
  }
}

std::vector<std::string> to_strings(const toml::node& node) {
  return to_vector<std::string>(node, "an array of strings", to_string);
}

std::vector<double> to_doubles(const toml::node& node) {
  return to_vector<double>(node, "an array of numbers", to_double);
}

std::vector<std::int64_t> to_ints(const toml::node& node) {
  return to_vector<std::int64_t>(node, "an array of integers", to_int);
}

toml::table parse_table(std::string_view text, const std::string& file) {
  try {
    return toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    const SourceLocation where{file, static_cast<int>(e.source().begin.line),
                               static_cast<int>(e.source().begin.column)};
    throw ConfigError(where, "", "TOML syntax error: " + std::string(e.description()));
  }
}

}  // namespace baton::toml_detail
