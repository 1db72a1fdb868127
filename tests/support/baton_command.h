#pragma once
// For whole-program tests: the shell command that runs the built baton executable with some arguments in a folder,
// and running it with its output captured.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "test_files.h"

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

/// What a command did: its exit status (-1 when it did not exit) and what it printed.
struct CommandResult {
  int status = -1;
  std::string out;
  std::string err;
};

/// Runs a shell command in `dir`, its stdout and stderr captured through out.txt and err.txt there.
inline CommandResult run_in(const std::filesystem::path& dir, const std::string& command) {
  const int raw =
      std::system(("cd " + shell_quote(dir.string()) + " && " + command + " > out.txt 2> err.txt").c_str());
  CommandResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_bytes(dir / "out.txt");
  r.err = read_bytes(dir / "err.txt");
  return r;
}

/// Runs `baton <args>` in `dir`.
inline CommandResult run_baton(const std::filesystem::path& dir, const std::vector<std::string>& args) {
  std::string command = "exec " + shell_quote(BATON_EXECUTABLE);
  for (const auto& a : args) command += " " + shell_quote(a);
  return run_in(dir, command);
}

}  // namespace baton::test
