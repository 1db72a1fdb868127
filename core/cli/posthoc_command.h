#pragma once
// `baton posthoc`: synthesise the EMA of any σ_rel from a run's post-hoc snapshots (docs/posthoc.md), or sweep a
// range of σ_rel through an evaluation.
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace baton::cli {

struct PosthocArgs {
  std::string run_dir;
  double sigma_rel = 0;
  std::string output;
  std::string sweep;        // "0.03:0.20:0.01"
  std::string eval_config;  // with --sweep
  std::vector<std::string> sets;
  bool allow_insecure = false;
};

/// Adds the subcommand and its options to `app`.
CLI::App* add_posthoc_subcommand(CLI::App& app, PosthocArgs& args);

/// Runs it: 0 on success, 2 for a bad command line; throws baton errors (exit 1, or 2 for ConfigError).
int run_posthoc(const CLI::App& command, const PosthocArgs& args);

/// Parses "low:high:step" into low, low + step, ... up to high (inclusive, within rounding). Throws baton::Error.
std::vector<double> parse_sweep(const std::string& text);

}  // namespace baton::cli
