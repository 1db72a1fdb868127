#include "posthoc_command.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include <CLI/CLI.hpp>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "baton/error.h"
#include "baton/model_tensors.h"
#include "baton/posthoc.h"
#include "baton/safetensors.h"
#include "config/config.h"
#include "logging/eval_plot.h"
#include "cli/assembly.h"

namespace fs = std::filesystem;

namespace baton::cli {
namespace {

constexpr int kExitUsage = 2;

std::string exact(double value) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

void describe(const posthoc::SnapshotSet& snapshots, const posthoc::SynthesisResult& result) {
  std::fprintf(stderr,
               "posthoc: sigma_rel %.4g (gamma %.4g) at batch %lld from %zu snapshots of sigma_rel", result.sigma_rel,
               result.gamma, static_cast<long long>(result.t), snapshots.info.size());
  for (double s : snapshots.sigma_rels()) std::fprintf(stderr, " %.4g", s);
  std::fprintf(stderr, "; profile fit error %.3g%%, sum of |weights| %.3g\n", 100 * result.weights.fit_error,
               result.weights.weight_l1);
}

int write_one(const PosthocArgs& args) {
  auto snapshots = posthoc::load_snapshots(args.run_dir);
  auto result = posthoc::synthesise(snapshots, args.sigma_rel);
  describe(snapshots, result);
  std::map<std::string, std::string> metadata{{"format", "pt"},
                                              {posthoc::kSnapshotSigmaRel, exact(result.sigma_rel)},
                                              {posthoc::kSnapshotGamma, exact(result.gamma)},
                                              {posthoc::kSnapshotTime, std::to_string(result.t)}};
  fs::path output = fs::absolute(args.output);
  fs::create_directories(output.parent_path());
  write_safetensors_atomic(output.string(), result.tensors, metadata);
  std::printf("wrote %s (sigma_rel %g, batch %lld)\n", args.output.c_str(), result.sigma_rel,
              static_cast<long long>(result.t));
  return 0;
}

// Puts synthesised weights into the model by name; every parameter and buffer must be there.
void load_into(torch::nn::Module& model, const NamedTensors& tensors) {
  std::map<std::string, at::Tensor> by_name(tensors.begin(), tensors.end());
  c10::NoGradGuard no_grad;
  auto assign = [&](const std::string& name, at::Tensor& target) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw Error("the snapshots hold no tensor '" + name + "' of the config's model");
    if (it->second.sizes() != target.sizes())
      throw Error("the snapshots' tensor '" + name + "' has another shape than the config's model's");
    target.copy_(it->second);
  };
  for (auto& item : model_tensors(model)) assign(item.name, item.tensor);
}

struct SweepRow {
  double sigma_rel = 0;
  EvalResult eval;
};

// A trainer evaluates once (its plugins are closed after), so each width gets a run of its own.
SweepRow evaluate(const RunConfig& config, const AssemblyOptions& options, const posthoc::SnapshotSet& snapshots,
                  double sigma_rel) {
  auto result = posthoc::synthesise(snapshots, sigma_rel);
  auto run = assemble_run(config, options);
  load_into(run->trainer->model(), result.tensors);
  for (const auto& eval : run->trainer->evaluate_standalone())
    if (eval.label == "eval" && eval.set.empty()) return {sigma_rel, eval};
  throw Error("the evaluation of sigma_rel " + std::to_string(sigma_rel) + " returned no 'eval' result");
}

int sweep(const PosthocArgs& args) {
  std::vector<double> targets = parse_sweep(args.sweep);
  auto snapshots = posthoc::load_snapshots(args.run_dir);
  for (double target : targets) posthoc::check_target(snapshots, target);  // fail before any evaluation
  std::vector<Override> overrides;
  for (const auto& s : args.sets) overrides.push_back(Override::parse(s));
  AssemblyOptions options;
  options.write_run_dir = false;
  options.quiet = true;
  options.allow_insecure_plugins = args.allow_insecure;
  RunConfig config = load_config(args.eval_config, overrides);
  std::vector<SweepRow> rows;
  std::string metric;  // the run's main metric (its first), by which the best width is chosen
  for (double target : targets) {
    rows.push_back(evaluate(config, options, snapshots, target));
    const EvalResult& eval = rows.back().eval;
    if (eval.metrics.empty()) throw Error("the evaluation of sigma_rel " + std::to_string(target) + " has no metric");
    if (metric.empty()) {
      metric = eval.metrics.front().name;
      std::printf("%10s %10s %10s\n", "sigma_rel", "loss", metric.c_str());
    }
    std::printf("%10.4g %10.4f %10.4f\n", target, eval.loss, eval.metric(metric));
    std::fflush(stdout);
  }
  // The best by the main metric, in its direction; the lower loss breaks a tie.
  const bool higher = rows.front().eval.metrics.front().higher_is_better;
  const auto better = [&](const SweepRow& a, const SweepRow& b) {
    const double x = a.eval.metric(metric), y = b.eval.metric(metric);
    return (higher ? x > y : x < y) || (x == y && a.eval.loss < b.eval.loss);
  };
  const SweepRow* best = &rows.front();
  for (const auto& row : rows)
    if (better(row, *best)) best = &row;
  PlotSeries series{"eval/" + metric, {}};
  for (const auto& row : rows) series.points.emplace_back(row.sigma_rel, row.eval.metric(metric));
  std::string plot = (fs::path(args.run_dir) / "posthoc_sweep.svg").string();
  write_line_chart_svg(plot, {series}, {"post-hoc EMA: " + metric + " by sigma_rel", "sigma_rel", "eval/" + metric});
  std::printf("best sigma_rel %.4g: %s %.4f, loss %.4f\nplot: %s\n", best->sigma_rel, metric.c_str(),
              best->eval.metric(metric), best->eval.loss, plot.c_str());
  return 0;
}

}  // namespace

std::vector<double> parse_sweep(const std::string& text) {
  double low = 0, high = 0, step = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%lf:%lf:%lf%c", &low, &high, &step, &tail) != 3)
    throw Error("--sweep " + text + ": expected low:high:step, e.g. 0.03:0.20:0.01");
  if (!(low > 0 && high >= low && step > 0))
    throw Error("--sweep " + text + ": expected 0 < low <= high and step > 0");
  std::vector<double> values;
  // Multiples of the step from low, so rounding never drifts; high counts if within a millionth of a step.
  for (long k = 0;; ++k) {
    double value = low + static_cast<double>(k) * step;
    if (value > high + 1e-6 * step) break;
    values.push_back(std::min(value, high));
    if (values.size() > 1000) throw Error("--sweep " + text + ": more than 1000 values");
  }
  return values;
}

CLI::App* add_posthoc_subcommand(CLI::App& app, PosthocArgs& args) {
  auto* cmd = app.add_subcommand("posthoc", "synthesise the EMA of any sigma_rel from a run's post-hoc snapshots");
  cmd->add_option("run", args.run_dir, "run folder (with posthoc/ written by the ema plugin)")->required();
  auto* sigma = cmd->add_option("--sigma-rel", args.sigma_rel, "relative width of the EMA to synthesise");
  auto* output = cmd->add_option("-o,--output", args.output, "safetensors file to write (with --sigma-rel)");
  auto* range = cmd->add_option("--sweep", args.sweep, "low:high:step of sigma_rel to evaluate (with --eval)");
  auto* eval = cmd->add_option("--eval", args.eval_config, "TOML run configuration whose model and eval set to use");
  cmd->add_option("--set", args.sets, "override a key of the --eval config: section.key=value (repeatable)");
  cmd->add_flag("--allow-insecure-plugins", args.allow_insecure,
                "load plugin files even when others may write to them");
  sigma->excludes(range);
  output->needs(sigma);
  eval->needs(range);
  return cmd;
}

int run_posthoc(const CLI::App& command, const PosthocArgs& args) {
  bool one = command.count("--sigma-rel") > 0, many = command.count("--sweep") > 0;
  const char* problem = !one && !many                          ? "give --sigma-rel with -o, or --sweep with --eval"
                        : one && command.count("--output") == 0 ? "--sigma-rel needs -o <file.safetensors>"
                        : many && command.count("--eval") == 0  ? "--sweep needs --eval <config.toml>"
                                                                : nullptr;
  if (problem != nullptr) {
    std::fprintf(stderr, "error: posthoc: %s\n", problem);
    return kExitUsage;
  }
  return one ? write_one(args) : sweep(args);
}

}  // namespace baton::cli
