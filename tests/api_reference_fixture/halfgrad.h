// A tiny tree for cmake/check_api_reference.py's own test: its docs/api.md leaves out exactly one
// public name (hg::nn::load -- hg::load is listed, in the other namespace's section).
#pragma once
#include "lib/widget.h"
