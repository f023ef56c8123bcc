// Pieces shared by the StableHLO writer and reader: type spelling, the exact
// text form of constant elements, and the names of the one-to-one ops.
#pragma once

#include <cstdint>
#include <string>

#include "capstep/ir.h"

namespace capstep::stablehlo_detail {

// "tensor<4x8xf32>", "tensor<f32>". MLIR spells our dtypes as we do.
std::string tensor_type(const Type& t);

// Exact text of one element value of dtype d (the value as stored in
// Attrs::literal; f32 is rounded to float first). Floats: "%.6e" when that
// reads back to the same bits, else full precision; non-finite as hex bits.
// i32: decimal. i1: true / false.
std::string element_text(DType d, double v);

// Little-endian bytes of the value as stored in a tensor of dtype d.
void append_element_bytes(DType d, double v, std::string& out);

// Saturating, UB-free double -> int32 (NaN -> 0), as literals are stored.
int32_t to_i32(double v);

// The StableHLO op name of an elementwise primitive without attributes
// ("stablehlo.add"), or nullptr for the ones with their own syntax.
const char* simple_op_name(Op op);

// The comparison type StableHLO needs for a dtype: FLOAT, SIGNED, UNSIGNED.
const char* compare_type(DType d);

// The identity a reduce starts from: 0 for sum; -inf, INT32_MIN or false for max.
double reduce_init(Op op, DType d);

}  // namespace capstep::stablehlo_detail
