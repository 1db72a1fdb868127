#pragma once
// How LibTorch's OpenMP threads wait between parallel regions. libgomp's default lets them spin for a while before
// sleeping; on a machine where any other process wants the cores (a second rank, an editor's build, a test suite's
// parallel jobs) the spinning threads hold cores that the thread a parallel region waits for needs, and a training
// step slows 10x or more. baton's runs wait passively unless the user chose otherwise; bench/bench_contention.sh
// measures the choice and docs/embedding.md says what a program that embeds baton sets.
#include <string>

namespace baton::cli {

/// Called first by cli_main, before any LibTorch work. For the commands that train or evaluate (train, eval,
/// predict, posthoc, launch, whose ranks inherit it), when the environment chooses no wait policy
/// (OMP_WAIT_POLICY, GOMP_SPINCOUNT) and BATON_OPENMP_WAIT is not "libgomp": sets OMP_WAIT_POLICY=PASSIVE and runs
/// the program again from the start with the same arguments (libgomp reads the variable once, when it is loaded,
/// before main), so this call does not return then. If that fails, the run goes on with libgomp's setting.
void settle_openmp_wait(int argc, char** argv);

/// Says how the OpenMP threads wait and who chose it, for a run's first lines: e.g. "OpenMP threads sleep when idle
/// (OMP_WAIT_POLICY=PASSIVE, baton's default)".
std::string openmp_wait_description();

}  // namespace baton::cli
