#pragma once
// The message of the error a call must throw, for tests that check what an error says: error_text(f) for a
// baton::Error of any kind, error_text<baton::CheckpointError>(f) for one kind only (another propagates, and the
// test reports it). "" when the call throws nothing, which no expected message equals.
#include <string>

#include "baton/error.h"

namespace baton::test {

/// Whether `part` occurs in `text`: what a test of a message checks.
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

template <class E = baton::Error, class F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace baton::test
