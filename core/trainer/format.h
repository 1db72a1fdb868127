#pragma once
// How the trainer's console lines write times and numbers.
#include <sstream>
#include <string>

#include "baton/time.h"

namespace baton {

inline std::string format_timestamp(const Timestamp& t) {
  return "ep " + std::to_string(t.epoch) + " ba " + std::to_string(t.batch);
}

inline std::string format_number(double value, int precision = 4) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(precision);
  out << value;
  return out.str();
}

}  // namespace baton
