// The fused causal attention kernels (ir.h: attention, attention_grad) as CUDA
// C++ text, compiled by NVRTC when a Program with them is compiled, and as C++
// by the plan emulation test (tests/plan_emulation_test.cpp). Flash-attention
// style, one thread per row of a tile of R rows, f32 or f64 throughout:
//   forward   a block per (head, tile of R query rows): the query tile in
//             shared memory, key/value tiles of R rows streamed through shared
//             memory, the scores of a tile and the online softmax (running max,
//             running sum, rescaled accumulator) in registers; key tiles wholly
//             above the diagonal are never loaded.
//   dq        a block per (head, query tile): pass 1 recomputes the row
//             log-sum-exp, then D = dout . out; pass 2 recomputes
//             p = exp(s - lse) and accumulates dq = sum_s p (dout.v_s - D) k_s
//             scale; writes dq (when wanted), lse and D (scratch).
//   dkv       a block per (head, key tile): streams the query tiles at or
//             below the diagonal with their lse and D, recomputes p and
//             accumulates dv = sum_t p dout_t and dk = sum_t p (dout_t.v - D_t)
//             q_t scale; writes dk and/or dv.
// Every kernel has one signature (unused pointers null):
//   (const T* q, const T* k, const T* v, const T* out, const T* dout, T* res0,
//    T* res1, T* lse, T* delta, int t, int dh, T scale)
// forward: res0 = out; dq: res0 = dq (or null); dkv: res0 = dk, res1 = dv.
#pragma once

#include <string>
#include <vector>

#include "capstep/ir.h"

namespace capstep::plan {

struct AttentionLaunch {
  int width = 0;          // D: the register width, 32, 64 or 128 (>= Dh; pad columns are zeros)
  int rows = 0;           // R: rows per tile = threads per block
  int64_t heads = 0;      // B * H
  int t = 0, dh = 0;
  unsigned blocks = 0;    // heads * ceil(T / R)
  std::string fwd, dq, dkv;  // kernel names
  size_t scratch_bytes = 0;  // lse and D of every row (attention_grad)
};

// The launch of the attention kernels for q's type [B,H,T,Dh]; Error when the
// dtype is not f32/f64, Dh > 128, or T or the grid does not fit the kernels' ints.
AttentionLaunch attention_launch(const Type& q);

// One translation unit with the kernels for these q types (one instantiation
// per dtype and width among them).
std::string attention_module_source(const std::vector<Type>& qs);

}  // namespace capstep::plan
