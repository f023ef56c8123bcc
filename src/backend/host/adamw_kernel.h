// The host AdamW kernel (src/backend/host/adamw.cpp): what optim::adamw_update
// and host::HostAdamW run, and what a fused group that is one parameter's
// AdamW update runs (fused.cpp), in the program's operation order, so the
// same bits as the group's members. The host backend's, so in its namespace;
// optim/ holds only the settings and the scalars.
#pragma once

#include <cstdint>

#include "capstep/optim.h"

namespace capstep::host {

// The update's constants as f32, as with_adamw bakes them into its program.
struct AdamWConstants {
  float b1, c1, b2, c2, eps;  // beta1, 1 - beta1, beta2, 1 - beta2, eps
};
AdamWConstants adamw_constants(const optim::AdamW& o);

// Elements [0, n) of one parameter, in place, on the calling thread; p, g, m
// and v must not overlap. round_g: each g read rounded to bf16 (to nearest
// even, bf16::from_float), as a program that converts the gradient to bf16
// and back before its update computes it.
void adamw_range(const AdamWConstants& k, const optim::AdamWScalars& s, float* __restrict p, const float* __restrict g,
                 float* __restrict m, float* __restrict v, int64_t n, bool round_g = false);

// The same into other buffers: p, m, v are read, p_out, m_out, v_out
// written; none of the seven may overlap another.
void adamw_range_into(const AdamWConstants& k, const optim::AdamWScalars& s, const float* __restrict p,
                      const float* __restrict g, const float* __restrict m, const float* __restrict v,
                      float* __restrict p_out, float* __restrict m_out, float* __restrict v_out, int64_t n,
                      bool round_g = false);

// The parts the host's threads share n elements in (each at least 4096 of
// them; one part below 8192).
int adamw_parts(int64_t n);

}  // namespace capstep::host
