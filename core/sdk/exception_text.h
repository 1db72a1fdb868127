#pragma once
// The text of an exception for a user: LibTorch's errors (c10::Error) without the C++ backtrace their what() carries,
// which says nothing to a user and buries the one line that does. Private, header-only: the engine's call_plugin
// template is instantiated in tests that compile engine.cpp themselves.
#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace baton::detail {

inline std::string exception_text(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) return torch_error->what_without_backtrace();
  return e.what();
}

}  // namespace baton::detail
