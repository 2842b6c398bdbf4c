// A fixture for cmake/check_layers.py: a core header that includes an op (pointing up a layer).
#pragma once
#include "ops/add.h"
