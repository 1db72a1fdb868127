#pragma once
// How many data-loader threads this process has: the loader names its threads "baton-loader", so a test can check
// that none outlives the loader, the training or the evaluation that started it (Linux: /proc/self/task).
#include <filesystem>
#include <fstream>
#include <string>

namespace baton::test {

inline int loader_threads() {
  int count = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name == "baton-loader") ++count;
  }
  return count;
}

}  // namespace baton::test
