#pragma once
// For whole-program tests: the shell command that runs the built baton executable with some arguments in a folder.
#include <filesystem>
#include <string>
#include <vector>

namespace baton::test {

/// `arg` single-quoted for a POSIX shell.
inline std::string shell_quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// "cd <dir> && exec <baton> <args...>", every part quoted; the caller appends redirections.
inline std::string baton_command(const std::filesystem::path& dir, const std::vector<std::string>& args) {
  std::string command = "cd " + shell_quote(dir.string()) + " && exec " + shell_quote(BATON_EXECUTABLE);
  for (const auto& a : args) command += " " + shell_quote(a);
  return command;
}

}  // namespace baton::test
