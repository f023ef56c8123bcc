// StableHLO text export of a Program, and a reader for what the exporter writes.
//
// to_stablehlo writes the module form that JAX itself exports (checked against
// jax 0.10.2's jax.jit(f).lower(...).as_text() and jax.export), so that XLA,
// IREE or any StableHLO consumer accepts it:
//
//   module @capstep attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
//     func.func public @main(%arg0: tensor<4x8xf32> {tf.aliasing_output = 1 : i32} loc("w"),
//                            %arg1: tensor<4xi32> loc("tokens"))
//         -> (tensor<f32> {jax.result_info = "loss"}, tensor<4x8xf32> {jax.result_info = "w_new"}) {
//       %0 = stablehlo.multiply %arg0, %arg0 : tensor<4x8xf32>
//       ...
//       return %5, %6 : tensor<f32>, tensor<4x8xf32>
//     }
//   }
//
// - Inputs are named by loc("name") (what JAX writes with debug info), outputs
//   by jax.result_info; Program::aliases become tf.aliasing_output = K : i32 on
//   the donated argument (K = output index), so XLA may reuse the buffer.
// - One primitive is one StableHLO op (see docs/stablehlo.md for the table).
//   reduce_sum / reduce_max become stablehlo.reduce with an add / maximum body
//   and the identity as init (0; -inf, INT32_MIN or false), written as a
//   constant just before the reduce. gather_rows / scatter_add_rows become
//   stablehlo.gather / stablehlo.scatter over axis 0 with
//   index_vector_dim = rank(indices) (implicit trailing index dimension).
//   StableHLO clamps gather indices and drops out-of-range scatter updates,
//   where the host interpreter throws: only in-range indices agree.
// - Constants print exactly: f32 constants are rounded to f32 (as any consumer
//   would), each value printed as the shortest of "%.6e" / full precision that
//   reads back to the same bits, non-finite values as hex bit patterns
//   (0x7F800000); constants of more than 16 elements (f32, f64, i32) as one
//   little-endian hex string dense<"0x...">; constants without elements as
//   dense<>, as MLIR writes them.
#pragma once

#include <string>

#include "capstep/ir.h"

namespace capstep {

// The Program as a StableHLO text module. Verifies the Program first (throws
// Error from verify()). `module_name` must be an MLIR bare identifier
// ([A-Za-z_][A-Za-z0-9_$.]*); it names the module, the function is @main.
//
// num_replicas: the replicas a data-parallel step runs on (mhlo.num_replicas;
// 1 to kMaxReplicas). Each all_reduce becomes a cross-replica
// "stablehlo.all_reduce" over replica_groups = [[0, ..., N-1]] with an add
// reducer region. Error for a count out of range.
constexpr int kMaxReplicas = 65536;
std::string to_stablehlo(const Program& p, const std::string& module_name = "capstep", int num_replicas = 1);

// Reads a module in the subset that to_stablehlo writes and rebuilds the
// Program: same primitives and attributes, input and output names, aliases
// (ordered by input index). Reduce init constants are folded back into
// reduce_sum / reduce_max. The returned Program is verified and named "main".
// Arguments without loc("...") are named "argK", results without
// jax.result_info "outK". Anything malformed or outside the subset throws
// Error whose message starts "stablehlo:LINE:COLUMN: ".
// mhlo.num_replicas may be any count in [1, kMaxReplicas] (stored in
// *num_replicas when given); an all_reduce must then name the one group of
// every replica, as to_stablehlo writes it. mhlo.num_partitions must be 1.
Program from_stablehlo(const std::string& text, int* num_replicas = nullptr);

}  // namespace capstep
