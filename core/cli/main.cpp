// The `baton` executable: the command line lives in libbaton (baton/cli.h).
#include "baton/cli.h"

int main(int argc, char** argv) { return baton::cli_main(argc, argv); }
