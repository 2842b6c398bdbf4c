// Writes a small safetensors file for tests/read_safetensors.py to read back with plain Python.
#include "halfgrad.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  hg::save(argv[1],
           {{"f32", hg::arange(6).reshape({2, 3})},
            {"i64", hg::from_vector(std::vector<int64_t>{7, -8}, {2})},
            {"bf16", hg::from_vector(std::vector<float>{1, 2, -3}, {3}, {.dtype = hg::bf16})},
            {"f16", hg::from_vector(std::vector<float>{0.5f, -65504.f}, {2}, {.dtype = hg::f16})},
            {"scalar", hg::full({}, 2.5, {.dtype = hg::f64})}},
           {{"written_by", "halfgrad"}});
  return 0;
}
