#include "test_support.h"
TEST_CASE("placeholder") { CHECK(true); }
