// The Catch2 main of the unit test program, alone in its own library so the
// test sources recompile without rebuilding Catch2's runner.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
