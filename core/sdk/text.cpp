#include "baton/text.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace baton {
namespace {

// printf with one precision and one double; + 0.0 turns -0 into 0, and a nan prints without the sign glibc gives
// some of them ("-nan"), which tells a reader nothing.
std::string print_number(const char* format, int precision, double value) {
  if (std::isnan(value)) return "nan";
  value += 0.0;
  // Measured first: %.*f of 1e308 has 309 digits before the point.
  const int length = std::snprintf(nullptr, 0, format, precision, value);
  std::string out(static_cast<std::size_t>(length), '\0');
  std::snprintf(out.data(), out.size() + 1, format, precision, value);
  return out;
}

}  // namespace

std::string format_number(double value, int significant) { return print_number("%.*g", significant, value); }

std::string format_decimals(double value, int decimals) { return print_number("%.*f", decimals, value); }

std::string format_bytes(std::int64_t bytes) {
  constexpr double kKiB = 1024.0;
  const double value = static_cast<double>(bytes);
  if (bytes < 1024 && bytes > -1024) return std::to_string(bytes) + " B";
  if (value < kKiB * kKiB) return format_decimals(value / kKiB, 1) + " KiB";
  if (value < kKiB * kKiB * kKiB) return format_decimals(value / (kKiB * kKiB), 1) + " MiB";
  return format_decimals(value / (kKiB * kKiB * kKiB), 1) + " GiB";
}

std::string format_exact(double value) {
  // The fewest %g digits that read back as the same double: what format_number writes with just enough digits.
  for (int significant = 1; significant < 17; ++significant) {
    std::string text = print_number("%.*g", significant, value);
    if (std::strtod(text.c_str(), nullptr) == value || std::isnan(value)) return text;
  }
  return print_number("%.*g", 17, value);  // 17 significant digits always read back
}

std::string format_shape(const std::int64_t* sizes, std::size_t count) {
  std::string out = "[";
  for (std::size_t i = 0; i < count; ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

// Backtracking to the last '*' alone suffices: a later star can match whatever an earlier one would have.
bool glob_match(std::string_view pattern, std::string_view name) {
  std::size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace baton
