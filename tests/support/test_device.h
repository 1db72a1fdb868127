#pragma once
#include <cstdlib>
#include <string>

namespace baton::test {

/// The device of the tests that take one: BATON_TEST_DEVICE ("cuda" under scripts/gpu-check.sh), "cpu" when unset.
/// The other tests stay on the CPU: they check CPU-specific behaviour (amp_fp16 refused there) or bitwise values.
inline std::string test_device() {
  const char* device = std::getenv("BATON_TEST_DEVICE");
  return device != nullptr && *device != '\0' ? device : "cpu";
}

}  // namespace baton::test
