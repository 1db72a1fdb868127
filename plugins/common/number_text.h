#pragma once
// A number as a config error quotes it: the shortest text that reads back as the value ("0.1", "1e-05", "nan").
#include <sstream>
#include <string>

namespace baton::plugins {

inline std::string number_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace baton::plugins
