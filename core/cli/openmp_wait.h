#pragma once
// How LibTorch's OpenMP threads wait between parallel regions. libgomp's default lets them spin for a while before
// sleeping; on a machine where any other process wants the cores (a second rank, an editor's build, a test suite's
// parallel jobs) the spinning threads hold cores that the thread a parallel region waits for needs, and a training
// step slows 2-10x. baton's runs spin 10000 times (libgomp's default is 300000) unless the user chose otherwise:
// as fast as the default alone, as fast as not spinning at all beside another process (bench/bench_contention.sh
// measures the choice); docs/embedding.md says what a program that embeds baton sets.
#include <string>

namespace baton::cli {

/// Called first by cli_main, before any LibTorch work. For the commands that train or evaluate (train, eval,
/// predict, posthoc, launch, whose ranks inherit it), when the environment chooses no wait policy
/// (OMP_WAIT_POLICY, GOMP_SPINCOUNT) and BATON_OPENMP_WAIT is not "libgomp": sets GOMP_SPINCOUNT=10000 and runs
/// the program again from the start with the same arguments (libgomp reads the variable once, when it is loaded,
/// before main), so this call does not return then. If that fails, the run goes on with libgomp's setting.
void settle_openmp_wait(int argc, char** argv);

/// Says how the OpenMP threads wait and who chose it, for a run's first lines: e.g. "OpenMP threads spin briefly,
/// then sleep when idle (GOMP_SPINCOUNT=10000, baton's default; ...)".
std::string openmp_wait_description();

}  // namespace baton::cli
