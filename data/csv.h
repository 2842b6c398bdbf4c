// A CSV file of numbers as a TensorDataset: one example per line, every column but the target
// the example's x (f32), the target column its y.
//
//   hg::data::TensorDataset iris = hg::data::read_csv("iris.csv", {.header = true});
//   // x f32 [150, 4], y i64 [150]
//
// Fields are decimal numbers (123, -4.5, 1e-3); blank lines are skipped. Every defect -- a
// missing field, a row of another length, text where a number belongs, a class target that is
// not a whole number -- is an hg::Error naming the line and the column.
#pragma once
#include <string>

#include "core/dtype.h"
#include "data/tensor_dataset.h"

namespace hg::data {

struct CsvOptions {
  int64_t target_column = -1;  // the target's column, counted from 0 (negative: from the end)
  bool header = false;         // the first line names the columns: skipped
  char delimiter = ',';
  DType target_dtype = i64;    // i64: class indices (whole numbers); f32 or f64: regression targets
};

TensorDataset read_csv(const std::string& path, CsvOptions options = {});

}  // namespace hg::data
