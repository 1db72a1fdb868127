// How light the plugin SDK is: compiles, in one run and with the build's own compiler and flags, a minimal plugin
// (only "baton/plugin.h", one callback, BATON_PLUGIN) and a translation unit that includes <torch/torch.h>, and
// prints the ratio of their best times. The SDK's promise is that a plugin which only watches events compiles in a
// small fraction of what LibTorch's umbrella header costs (target: ratio <= 0.3).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

constexpr const char* kPluginSource = R"(#include "baton/plugin.h"

namespace {
class BatchCounter final : public baton::Callback {
 public:
  explicit BatchCounter(const baton::PluginConfig& config) : every_(config.get_or<int>("every", 1)) {}
  void batch_end(baton::State& state, baton::Logger& logger) override {
    if (state.timestamp().batch % every_ == 0) logger.log_metric("counter/batch", double(state.timestamp().batch));
  }
 private:
  int every_;
};
}  // namespace

BATON_PLUGIN(BatchCounter, "batch_counter", "1.0.0", "counts batches")
)";

constexpr const char* kTorchSource = R"(#include <torch/torch.h>

torch::Tensor scaled_relu(const torch::Tensor& x, double factor) { return torch::relu(x) * factor; }
)";

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

// Seconds to compile source into an object file; exits with the compiler's output when it fails.
double compile_seconds(const fs::path& source, const fs::path& dir) {
  const fs::path object = dir / (source.stem().string() + ".o");
  const fs::path log = dir / (source.stem().string() + ".log");
  const std::string command = std::string(BENCH_CXX_COMPILER) + " " + BENCH_CXX_FLAGS + " " + BENCH_INCLUDE_FLAGS +
                              " -c " + quoted(source) + " -o " + quoted(object) + " > " + quoted(log) + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  if (status != 0) {
    std::ifstream in(log);
    std::fprintf(stderr, "compiling %s failed:\n%s\n%s\n", source.c_str(), command.c_str(),
                 std::string(std::istreambuf_iterator<char>(in), {}).c_str());
    std::exit(1);
  }
  return elapsed.count();
}

void write(const fs::path& path, const char* text) { std::ofstream(path) << text; }

void print_times(const char* label, const std::vector<double>& times) {
  std::printf("%-40s best %6.2f s of", label, *std::min_element(times.begin(), times.end()));
  for (double t : times) std::printf(" %.2f", t);
  std::printf("\n");
}

}  // namespace

int main() {
  const fs::path dir = fs::temp_directory_path() / ("baton_bench_plugin_compile_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path plugin = dir / "minimal_plugin.cpp";
  const fs::path torch = dir / "torch_umbrella.cpp";
  write(plugin, kPluginSource);
  write(torch, kTorchSource);

  std::printf("compiler: %s\nflags: %s\n", BENCH_CXX_COMPILER, BENCH_CXX_FLAGS);
  std::fflush(stdout);
  // Interleaved, so that a change in machine load during the run affects both sides alike.
  std::vector<double> plugin_times, torch_times;
  for (int round = 0; round < 3; ++round) {
    plugin_times.push_back(compile_seconds(plugin, dir));
    if (round < 2) torch_times.push_back(compile_seconds(torch, dir));
  }
  fs::remove_all(dir);

  print_times("plugin TU (baton/plugin.h only):", plugin_times);
  print_times("TU including <torch/torch.h>:", torch_times);
  const double ratio = *std::min_element(plugin_times.begin(), plugin_times.end()) /
                       *std::min_element(torch_times.begin(), torch_times.end());
  std::printf("RESULT plugin_compile_vs_torch_h=%.3f\n", ratio);
  return 0;
}
