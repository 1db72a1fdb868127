#pragma once
// For tests that check baton's files with a Python tool from the Python package registry (TensorBoard's reader, an
// MLflow server): a venv of the build folder holding it, made on first use and kept. Include after "baton_test.h".
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "baton_command.h"

namespace baton::test {

/// The venv at `venv` once `probe` (Python code, e.g. "import tensorboard") runs in it: reused when it does already,
/// else made afresh with `python -m venv` and `pip install <packages>` (once per process). Nothing when pip fails
/// (no registry, or a TLS interception the machine does not trust): a MESSAGE says so with pip's reason and
/// `fallback` (what the test does instead), or, when the environment variable `required` is "1" (CI, which reaches
/// the registry), the test fails with it.
inline std::optional<std::filesystem::path> pip_venv(const std::filesystem::path& venv, const std::string& python,
                                                     const std::string& packages, const std::string& probe,
                                                     const char* required, const std::string& fallback) {
  namespace fs = std::filesystem;
  const fs::path scratch = scratch_dir("pip_venv_" + venv.filename().string());
  if (run_in(scratch, shell_quote((venv / "bin" / "python").string()) + " -c " + shell_quote(probe)).status == 0)
    return venv;
  fs::remove_all(venv);
  fs::create_directories(venv.parent_path());
  const auto made = run_in(scratch, shell_quote(python) + " -m venv " + shell_quote(venv.string()) + " && " +
                                        shell_quote((venv / "bin" / "pip").string()) + " install -q " + packages);
  if (made.status == 0) return venv;
  const std::string why = made.err.substr(made.err.size() > 1500 ? made.err.size() - 1500 : 0);
  const char* value = std::getenv(required);
  if (value != nullptr && std::string(value) == "1")
    FAIL("could not install " << packages << " into " << venv << ": " << why << made.out);
  MESSAGE(packages << " could not be installed into " << venv << " (pip: " << why << "); " << fallback);
  fs::remove_all(venv);
  return std::nullopt;
}

}  // namespace baton::test
