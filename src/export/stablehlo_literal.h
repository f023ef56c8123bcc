// Reading the body of dense<...>: a splat, a nested list, a hex string or
// nothing (dense<>, MLIR's form for a tensor without elements),
// turned into Attrs::literal values once the tensor type (after ':') is known.
#pragma once

#include <string>
#include <vector>

#include "capstep/ir.h"
#include "export/mlir_cursor.h"

namespace capstep::stablehlo_detail {

struct DenseLiteral {
  enum class Form { splat, list, hex, empty } form = Form::splat;
  struct Elem {
    std::string text;      // number token, "true" or "false"
    size_t pos = 0;
  };
  std::vector<Elem> elems;           // splat: 1; list: row-major leaves
  std::vector<int64_t> list_shape;   // list: length at each nesting level
  std::string bytes;                 // hex: decoded bytes
  size_t pos = 0;                    // where dense< starts
};

// Reads `dense<...>` (the cursor is at "dense").
DenseLiteral read_dense(Cursor& c);

// The values of the literal for a tensor of type t (1 value for a splat), or a
// located Error when the literal does not fit the type.
std::vector<double> literal_values(Cursor& c, const DenseLiteral& d, const Type& t);

}  // namespace capstep::stablehlo_detail
