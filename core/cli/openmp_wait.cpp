#include "cli/openmp_wait.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace baton::cli {
namespace {

// The spin count baton sets: 10000 spin iterations before an idle thread sleeps. bench/bench_contention.sh
// on 2 cores, 2 threads: alone it trains as fast as libgomp's 300000 (19.2 batches/s each, three alternating runs),
// where OMP_WAIT_POLICY=PASSIVE (0 spins) lost 16 % (16.0); beside a CPU burner it keeps 8.0 batches/s as PASSIVE
// does, where libgomp's default fell to 4.2.
constexpr const char* kSpinCount = "10000";

// Set by baton beside GOMP_SPINCOUNT when it chose the setting itself, so the run can say whose choice it is. A
// user who wants libgomp's own default (to compare, as bench_contention does) sets it to "libgomp".
constexpr const char* kChoice = "BATON_OPENMP_WAIT";

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// The first word that is not an option: the command.
bool computes(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    for (const char* command : {"train", "eval", "predict", "posthoc", "launch"})
      if (std::strcmp(argv[i], command) == 0) return true;
    return false;
  }
  return false;
}

}  // namespace

void settle_openmp_wait(int argc, char** argv) {
  if (env("OMP_WAIT_POLICY") != nullptr || env("GOMP_SPINCOUNT") != nullptr) return;
  if (const char* choice = env(kChoice); choice != nullptr && std::strcmp(choice, "libgomp") == 0) return;
  if (!computes(argc, argv)) return;
  ::setenv("GOMP_SPINCOUNT", kSpinCount, 1);
  ::setenv(kChoice, "baton", 1);
  ::execv("/proc/self/exe", argv);
  // Not run again (no /proc, say): this process's libgomp keeps its own setting; say so rather than claim baton's.
  ::unsetenv("GOMP_SPINCOUNT");
  ::setenv(kChoice, "unchanged", 1);
}

std::string openmp_wait_description() {
  const char* policy = env("OMP_WAIT_POLICY");
  const char* spin = env("GOMP_SPINCOUNT");
  const char* choice = env(kChoice);
  const bool baton_chose = choice != nullptr && std::strcmp(choice, "baton") == 0;
  if (policy == nullptr && spin != nullptr && std::strcmp(spin, kSpinCount) == 0 && baton_chose)
    return std::string("OpenMP threads spin briefly, then sleep when idle (GOMP_SPINCOUNT=") + kSpinCount +
           ", baton's default; OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment choose another)";
  std::string yours;
  if (policy != nullptr) yours += std::string("OMP_WAIT_POLICY=") + policy;
  if (spin != nullptr) yours += std::string(yours.empty() ? "" : ", ") + "GOMP_SPINCOUNT=" + spin;
  if (!yours.empty()) return "OpenMP threads wait as the environment says (" + yours + ")";
  if (choice != nullptr && std::strcmp(choice, "unchanged") == 0)
    return "OpenMP threads spin when idle (libgomp's default: baton could not run itself again to change it)";
  return "OpenMP threads spin when idle (libgomp's default)";
}

}  // namespace baton::cli
