// The one Catch2 main of the integration tests, alone in its translation unit
// so the (slow to compile) runner is built once.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
