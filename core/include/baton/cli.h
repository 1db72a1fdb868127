#pragma once
// The baton command line as a function. The `baton` executable is this one call, so a program that embeds baton
// (its own models or data registered first, say) can offer the very same subcommands: train, check, eval, predict,
// plugins, launch, posthoc. `baton launch` starts its ranks by re-running the current executable, so launch from a
// program whose main() calls cli_main.
#include "baton/export.h"

namespace baton {

/// Parses and runs one command line (argv[0] is the program). Returns the exit status and never throws: 0 success,
/// 1 a run or plugin failure, 2 a bad command line or configuration, 130 interrupted (SIGINT/SIGTERM); every error
/// has been printed to stderr as "error: <what>".
BATON_API int cli_main(int argc, char** argv);

}  // namespace baton
