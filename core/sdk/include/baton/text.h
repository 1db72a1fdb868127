#pragma once
// Numbers and shapes as baton writes them in messages, logs and files: one way each, for the core and plugins alike;
// and the one way a config's name pattern matches a tensor's or metric's name.
// No LibTorch: format_shape takes any container of sizes with data() and size() (a std::vector<int64_t>,
// at::IntArrayRef).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "baton/export.h"

namespace baton {

/// A number for people to read, with `significant` digits as printf's %g: format_number(0.99930709) is
/// "0.999307", format_number(1000) "1000", format_number(1e-5) "1e-05", format_number(0.28867513, 4) "0.2887".
/// -0 reads "0" (a sign on nothing looks like an error); nan reads "nan".
BATON_API std::string format_number(double value, int significant = 6);

/// A number with exactly `decimals` digits after the point, as printf's %.*f writes it: format_decimals(2.302585,
/// 4) is "2.3026", format_decimals(12.0, 1) "12.0". For columns of values (losses, seconds) that line up.
BATON_API std::string format_decimals(double value, int decimals);

/// The shortest %g text that reads back as exactly `value` (format_number with just enough digits):
/// format_exact(0.05) is "0.05" (not "0.050000000000000003"), format_exact(0.1 + 0.2) "0.30000000000000004",
/// format_exact(1e-5) "1e-05", format_exact(3) "3". For what is read back (a stored config, a CSV of metrics, a
/// time's text) and for quoting a user's value, which is then what they wrote. -0 reads "0", nan "nan", the
/// infinities "inf" and "-inf".
BATON_API std::string format_exact(double value);

/// A size for people to read, in binary units with one decimal: format_bytes(812) is "812 B", format_bytes(70144)
/// "68.5 KiB", format_bytes(3 << 20) "3.0 MiB", and GiB from 1 GiB on.
BATON_API std::string format_bytes(std::int64_t bytes);

/// A tensor's shape as "[64, 1, 14, 14]"; a scalar's is "[]".
BATON_API std::string format_shape(const std::int64_t* sizes, std::size_t count);
template <class Sizes>
std::string format_shape(const Sizes& sizes) {
  return format_shape(sizes.data(), sizes.size());
}

/// Whether `name` matches the glob `pattern`: '*' matches any run of characters (dots included), '?' exactly one,
/// everything else itself. glob_match("*.bias", "features.0.bias") is true, glob_match("fc?", "fc10") false.
BATON_API bool glob_match(std::string_view pattern, std::string_view name);

}  // namespace baton
