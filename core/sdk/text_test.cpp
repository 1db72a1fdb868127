// baton/text.h: one way each to write a number or a shape. Expected texts are printf's and the C++ standard's
// shortest round-trip form, worked out by hand.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "baton/text.h"

TEST_SUITE("text") {
  TEST_CASE("format_number writes significant digits as %g does") {
    using baton::format_number;
    CHECK(format_number(0.9993070929904525) == "0.999307");  // six by default
    CHECK(format_number(2.0) == "2");
    CHECK(format_number(1000.0) == "1000");
    CHECK(format_number(0.8125) == "0.8125");
    CHECK(format_number(1e-5) == "1e-05");
    CHECK(format_number(1234567.0) == "1.23457e+06");
    CHECK(format_number(-2.5) == "-2.5");
    CHECK(format_number(0.28867513459481287, 4) == "0.2887");
    CHECK(format_number(0.05, 6) == "0.05");
    CHECK(format_number(-0.0) == "0");
    CHECK(format_number(std::numeric_limits<double>::quiet_NaN()) == "nan");
    CHECK(format_number(-std::numeric_limits<double>::quiet_NaN()) == "nan");
    CHECK(format_number(std::numeric_limits<double>::infinity()) == "inf");
    CHECK(format_number(-std::numeric_limits<double>::infinity()) == "-inf");
  }

  TEST_CASE("format_bytes: bytes below 1 KiB, then KiB, MiB and GiB with one decimal") {
    CHECK(baton::format_bytes(0) == "0 B");
    CHECK(baton::format_bytes(812) == "812 B");
    CHECK(baton::format_bytes(1023) == "1023 B");
    CHECK(baton::format_bytes(1024) == "1.0 KiB");
    CHECK(baton::format_bytes(70144) == "68.5 KiB");  // 68.5 x 1024
    CHECK(baton::format_bytes(3 << 20) == "3.0 MiB");
    CHECK(baton::format_bytes((std::int64_t{5} << 30) + (std::int64_t{1} << 29)) == "5.5 GiB");
  }

  TEST_CASE("format_decimals writes a fixed number of digits after the point") {
    using baton::format_decimals;
    CHECK(format_decimals(2.302585, 4) == "2.3026");
    CHECK(format_decimals(12.0, 1) == "12.0");
    CHECK(format_decimals(0.5, 0) == "0");      // a tie rounds to even, as printf does
    CHECK(format_decimals(1.005, 2) == "1.00");  // 1.005 is stored as 1.00499999999999989...
    CHECK(format_decimals(-0.0, 2) == "0.00");
    CHECK(format_decimals(-3.14159, 3) == "-3.142");
    // Longer than any fixed buffer a caller might guess: 1e308 has 309 digits before the point.
    const std::string huge = format_decimals(1e308, 0);
    CHECK(huge.size() == 309);
    CHECK(huge.substr(0, 20) == "10000000000000000109");
    CHECK(format_decimals(std::numeric_limits<double>::quiet_NaN(), 2) == "nan");
  }

  TEST_CASE("format_exact writes the shortest text that reads back as the same double") {
    using baton::format_exact;
    CHECK(format_exact(0.05) == "0.05");  // %.17g would write 0.050000000000000003
    CHECK(format_exact(0.1) == "0.1");
    CHECK(format_exact(0.1 + 0.2) == "0.30000000000000004");  // not 0.3: a different double
    CHECK(format_exact(3.0) == "3");
    CHECK(format_exact(1e-5) == "1e-05");
    CHECK(format_exact(123456789012.0) == "123456789012");
    CHECK(format_exact(1e300) == "1e+300");
    CHECK(format_exact(-2.5) == "-2.5");
    CHECK(format_exact(-0.0) == "0");
    CHECK(format_exact(std::numeric_limits<double>::quiet_NaN()) == "nan");
    CHECK(format_exact(std::numeric_limits<double>::infinity()) == "inf");
    CHECK(format_exact(-std::numeric_limits<double>::infinity()) == "-inf");
    // Every text reads back as the value it was written from.
    for (double value : {0.05, 1.0 / 3.0, 2.0 / 3.0, 6.02214076e23, 5e-324, std::numeric_limits<double>::max()}) {
      CAPTURE(value);
      CHECK(std::strtod(format_exact(value).c_str(), nullptr) == value);
    }
  }

  TEST_CASE("format_shape writes sizes in brackets, from any container of them") {
    CHECK(baton::format_shape(std::vector<std::int64_t>{64, 1, 14, 14}) == "[64, 1, 14, 14]");
    CHECK(baton::format_shape(std::vector<std::int64_t>{7}) == "[7]");
    CHECK(baton::format_shape(std::vector<std::int64_t>{}) == "[]");  // a scalar
    const std::int64_t sizes[] = {3, 0};
    CHECK(baton::format_shape(sizes, 2) == "[3, 0]");
  }

  TEST_CASE("glob_match: '*' any run (dots included), '?' one character, as Python's fnmatchcase without brackets") {
    using baton::glob_match;
    CHECK(glob_match("*.bias", "features.0.bias"));
    CHECK(glob_match("*norm*", "layer_norm.weight"));
    CHECK(glob_match("fc?", "fc1"));
    CHECK_FALSE(glob_match("fc?", "fc10"));
    CHECK(glob_match("a*b*c", "aXXbYYbZc"));  // the first 'b' is not the one: backtracks to the last star
    CHECK_FALSE(glob_match("a*b*c", "aXXbYYbZ"));
    CHECK_FALSE(glob_match("classifier.*", "classifier"));  // the dot is literal
    CHECK(glob_match("*", ""));
    CHECK(glob_match("", ""));
    CHECK_FALSE(glob_match("", "x"));
    CHECK_FALSE(glob_match("?*", ""));
  }
}
