#pragma once
// Include this first in every test file that uses LibTorch. c10 is built with glog, whose CHECK macros would
// silently replace doctest's (or be replaced by them) depending on include order; this fixes the order: glog's
// are defined, removed, then doctest's are defined, and c10's header guard keeps glog's from coming back.
#include <c10/util/Logging.h>
#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>

#include "test_files.h"  // scratch_dir, read_bytes, write_bytes
