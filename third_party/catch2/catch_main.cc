// Provides main() for Catch2 (v2) unit tests; see BUILD.bazel.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
