// A fixture for cmake/check_layers.py: an op header including core (pointing down: allowed).
#pragma once
#include "core/tensor.h"
