// memory_monitor against what the test reads itself: getrusage's peak and /proc/self/status's VmRSS around each
// event, and 256 MiB touched between two batches showing in both; names declared at init; interval.
#include "baton_test.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "monitor_test_support.h"
#include "plugin_files.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace memory_monitor_test {

using namespace monitor_test;

namespace {

double test_peak_mib() {
  rusage usage{};
  REQUIRE(::getrusage(RUSAGE_SELF, &usage) == 0);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB to MiB
}

double test_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  FAIL("no VmRSS in /proc/self/status");
  return 0;
}

bool declared(const baton::Declarations& run, const std::string& name) {
  return std::find(run.metrics().begin(), run.metrics().end(), name) != run.metrics().end();
}

}  // namespace

TEST_SUITE("memory_monitor") {
  TEST_CASE("peak and current resident memory at batch_end, as getrusage and /proc/self/status say") {
    baton::State state;
    RecordingLogger logger(&state);
    auto plugin = load_plugin(baton::test::plugin_file("memory_monitor"), "memory_monitor", "");
    REQUIRE(plugin.callback != nullptr);
    baton::Declarations run;
    plugin.callback->declare(run);
    CHECK(declared(run, "memory/rss_mib"));
    CHECK(declared(run, "memory/peak_rss_mib"));
    CHECK(run.metrics().size() == 2);
    plugin.callback->run_event(baton::Event::init, state, logger);

    state.progress.now.batch = 1;
    const double peak_before = test_peak_mib(), rss_before = test_rss_mib();
    plugin.callback->run_event(baton::Event::batch_end, state, logger);
    const double peak_after = test_peak_mib(), rss_after = test_rss_mib();
    const double peak = logger.last("memory/peak_rss_mib"), rss = logger.last("memory/rss_mib");
    CHECK(peak >= peak_before);
    CHECK(peak <= peak_after);
    // VmRSS moves by a few pages between two readings (the logger's vector grows); 4 MiB is plenty.
    CHECK(rss >= std::min(rss_before, rss_after) - 4);
    CHECK(rss <= std::max(rss_before, rss_after) + 4);

    // 256 MiB written page by page between two batches: both figures rise by about that much.
    const std::size_t size = 256u << 20;
    std::unique_ptr<char[]> block(new char[size]);
    std::memset(block.get(), 1, size);
    state.progress.now.batch = 2;
    plugin.callback->run_event(baton::Event::batch_end, state, logger);
    CHECK(logger.last("memory/rss_mib") - rss == doctest::Approx(256).epsilon(0.1));
    CHECK(logger.last("memory/peak_rss_mib") >= peak + 200);
    CHECK(block[size - 1] == 1);
  }

  TEST_CASE("interval and a CUDA device on a LibTorch without CUDA") {
    baton::State state;
#ifndef BATON_MEMORY_MONITOR_CUDA
    // Without CUDA support a run on a GPU gets the resident memory and a warning saying what is missing.
    state.facts.set_device("cuda");
#endif
    RecordingLogger logger(&state);
    auto plugin = load_plugin(baton::test::plugin_file("memory_monitor"), "memory_monitor", "interval = 3");
    baton::Declarations run("cuda");
    plugin.callback->declare(run);
    plugin.callback->run_event(baton::Event::init, state, logger);
#ifndef BATON_MEMORY_MONITOR_CUDA
    CHECK(logger.warnings.size() == 1);
    CHECK(run.metrics().size() == 2);
#else
    CHECK(run.metrics().size() == 5);  // and the CUDA allocator's three
#endif
    for (int batch = 1; batch <= 6; ++batch) {
      state.progress.now.batch = batch;
      plugin.callback->run_event(baton::Event::batch_end, state, logger);
    }
    CHECK(std::count_if(logger.metrics.begin(), logger.metrics.end(),
                        [](const auto& m) { return m.first == "memory/peak_rss_mib"; }) == 2);
    CHECK(config_error(baton::test::plugin_file("memory_monitor"), "memory_monitor", "interval = 0").find("interval") != std::string::npos);
  }
}

}  // namespace memory_monitor_test
