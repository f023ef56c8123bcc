// The fused causal attention kernels' source: see attention_source.h.
#include "backend/plan/attention_source.h"

#include <climits>
#include <set>
#include <utility>

namespace capstep::plan {
namespace {

// R rows per tile: the shared tiles of the backward (4 R x D elements) stay
// within 32 KiB, under the 48 KiB of static shared memory a block may have.
int rows_for(int width, size_t elem) { return static_cast<int>(8192 / (static_cast<size_t>(width) * elem)); }

const char* const kSource = R"CUDA(// capstep: fused causal attention kernels (src/backend/plan/attention_source.cpp)
namespace capstep_attn {

__device__ __forceinline__ float ex(float x) { return expf(x); }
__device__ __forceinline__ double ex(double x) { return exp(x); }
__device__ __forceinline__ float lg(float x) { return logf(x); }
__device__ __forceinline__ double lg(double x) { return log(x); }
// A finite start for the running max: exp(low - s) is exactly 0.
__device__ __forceinline__ float low(float) { return -3.0e38f; }
__device__ __forceinline__ double low(double) { return -1.0e300; }
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// Rows [row0, row0 + R) of a [t, dh] matrix into s[R][W], zeros past t and dh
// (so every dot product may run over all D columns). All R threads take part.
template <class T, int D, int R, int W>
__device__ __forceinline__ void load_tile(T (*s)[W], const T* g, int row0, int t, int dh) {
  for (int i = threadIdx.x; i < R * D; i += R) {
    const int r = i / D, c = i % D, row = row0 + r;
    s[r][c] = (row < t && c < dh) ? g[(long long)row * dh + c] : T(0);
  }
}

template <class T, int D, int R>
__device__ void fwd(const T* q, const T* k, const T* v, T* out, int t, int dh, T scale) {
  __shared__ T qs[R][D + 1];  // padded: each thread reads its own row
  __shared__ T ks[R][D];      // every thread reads the same element: a broadcast
  __shared__ T vs[R][D];
  const int tiles = (t + R - 1) / R;
  const int head = blockIdx.x / tiles, tile = tiles - 1 - (int)(blockIdx.x % tiles);  // longest rows first
  const long long base = (long long)head * t * dh;
  q += base; k += base; v += base; out += base;
  const int me = threadIdx.x, row = tile * R + me;
  load_tile<T, D, R, D + 1>(qs, q, tile * R, t, dh);
  T acc[D];
#pragma unroll
  for (int c = 0; c < D; ++c) acc[c] = T(0);
  T m = low(T(0)), l = T(0);
  for (int kt = 0; kt <= tile; ++kt) {  // key tiles above the diagonal: never loaded
    __syncthreads();
    load_tile<T, D, R, D>(ks, k, kt * R, t, dh);
    load_tile<T, D, R, D>(vs, v, kt * R, t, dh);
    __syncthreads();
    if (row < t) {
      const int n = imin(R, row - kt * R + 1);  // keys kt*R + j <= row
#pragma unroll 1
      for (int j = 0; j < n; ++j) {
        T x = T(0);
#pragma unroll
        for (int c = 0; c < D; ++c) x += qs[me][c] * ks[j][c];
        x *= scale;
        if (x > m) {  // online softmax: a new running max rescales what is summed so far
          const T corr = ex(m - x);
          l *= corr;
#pragma unroll
          for (int c = 0; c < D; ++c) acc[c] *= corr;
          m = x;
        }
        const T p = ex(x - m);
        l += p;
#pragma unroll
        for (int c = 0; c < D; ++c) acc[c] += p * vs[j][c];
      }
    }
  }
  if (row < t) {
    const T inv = T(1) / l;
#pragma unroll
    for (int c = 0; c < D; ++c)
      if (c < dh) out[(long long)row * dh + c] = acc[c] * inv;
  }
}

template <class T, int D, int R>
__device__ void dq(const T* q, const T* k, const T* v, const T* o, const T* dout, T* gq, T* lse, T* delta, int t,
                   int dh, T scale) {
  __shared__ T qs[R][D + 1];
  __shared__ T dos[R][D + 1];
  __shared__ T ks[R][D];
  __shared__ T vs[R][D];
  const int tiles = (t + R - 1) / R;
  const int head = blockIdx.x / tiles, tile = tiles - 1 - (int)(blockIdx.x % tiles);
  const long long base = (long long)head * t * dh;
  q += base; k += base; v += base; o += base; dout += base;
  lse += (long long)head * t;
  delta += (long long)head * t;
  const int me = threadIdx.x, row = tile * R + me;
  load_tile<T, D, R, D + 1>(qs, q, tile * R, t, dh);
  load_tile<T, D, R, D + 1>(dos, dout, tile * R, t, dh);
  // pass 1: the row's log-sum-exp
  T m = low(T(0)), l = T(0);
  for (int kt = 0; kt <= tile; ++kt) {
    __syncthreads();
    load_tile<T, D, R, D>(ks, k, kt * R, t, dh);
    __syncthreads();
    if (row < t) {
      const int n = imin(R, row - kt * R + 1);
#pragma unroll 1
      for (int j = 0; j < n; ++j) {
        T x = T(0);
#pragma unroll
        for (int c = 0; c < D; ++c) x += qs[me][c] * ks[j][c];
        x *= scale;
        if (x > m) {
          l *= ex(m - x);
          m = x;
        }
        l += ex(x - m);
      }
    }
  }
  const T lrow = m + lg(l);
  T d = T(0);
  if (row < t)
    for (int c = 0; c < dh; ++c) d += dos[me][c] * o[(long long)row * dh + c];
  // pass 2: dq
  T acc[D];
#pragma unroll
  for (int c = 0; c < D; ++c) acc[c] = T(0);
  for (int kt = 0; kt <= tile; ++kt) {
    __syncthreads();
    load_tile<T, D, R, D>(ks, k, kt * R, t, dh);
    load_tile<T, D, R, D>(vs, v, kt * R, t, dh);
    __syncthreads();
    if (row < t) {
      const int n = imin(R, row - kt * R + 1);
#pragma unroll 1
      for (int j = 0; j < n; ++j) {
        {
          T x = T(0), dp = T(0);
#pragma unroll
          for (int c = 0; c < D; ++c) {
            x += qs[me][c] * ks[j][c];
            dp += dos[me][c] * vs[j][c];
          }
          const T p = ex(x * scale - lrow);
          const T ds = p * (dp - d) * scale;
#pragma unroll
          for (int c = 0; c < D; ++c) acc[c] += ds * ks[j][c];
        }
      }
    }
  }
  if (row < t) {
    lse[row] = lrow;
    delta[row] = d;
    if (gq) {
#pragma unroll
      for (int c = 0; c < D; ++c)
        if (c < dh) gq[base + (long long)row * dh + c] = acc[c];
    }
  }
}

template <class T, int D, int R>
__device__ void dkv(const T* q, const T* k, const T* v, const T* dout, T* dk, T* dv, const T* lse, const T* delta,
                    int t, int dh, T scale) {
  __shared__ T ks[R][D + 1];
  __shared__ T vs[R][D + 1];
  __shared__ T qs[R][D];
  __shared__ T dos[R][D];
  __shared__ T ls[R];
  __shared__ T dl[R];
  const int tiles = (t + R - 1) / R;
  const int head = blockIdx.x / tiles, kt = (int)(blockIdx.x % tiles);  // the first key tiles have the most rows below them
  const long long base = (long long)head * t * dh;
  q += base; k += base; v += base; dout += base;
  lse += (long long)head * t;
  delta += (long long)head * t;
  const int me = threadIdx.x, key = kt * R + me;
  load_tile<T, D, R, D + 1>(ks, k, kt * R, t, dh);
  load_tile<T, D, R, D + 1>(vs, v, kt * R, t, dh);
  T ak[D], av[D];
#pragma unroll
  for (int c = 0; c < D; ++c) ak[c] = av[c] = T(0);
  for (int qt = kt; qt < tiles; ++qt) {  // query tiles above the diagonal see no key of this tile
    __syncthreads();
    load_tile<T, D, R, D>(qs, q, qt * R, t, dh);
    load_tile<T, D, R, D>(dos, dout, qt * R, t, dh);
    {
      const int r = qt * R + me;
      ls[me] = r < t ? lse[r] : T(0);
      dl[me] = r < t ? delta[r] : T(0);
    }
    __syncthreads();
    if (key < t) {
      const int i0 = key > qt * R ? key - qt * R : 0, i1 = imin(R, t - qt * R);  // rows key <= row < t
#pragma unroll 1
      for (int i = i0; i < i1; ++i) {
        {
          T x = T(0), dp = T(0);
#pragma unroll
          for (int c = 0; c < D; ++c) {
            x += qs[i][c] * ks[me][c];
            dp += dos[i][c] * vs[me][c];
          }
          const T p = ex(x * scale - ls[i]);
          const T ds = p * (dp - dl[i]) * scale;
#pragma unroll
          for (int c = 0; c < D; ++c) {
            av[c] += p * dos[i][c];
            ak[c] += ds * qs[i][c];
          }
        }
      }
    }
  }
  if (key < t) {
#pragma unroll
    for (int c = 0; c < D; ++c) {
      if (c < dh) {
        if (dk) dk[base + (long long)key * dh + c] = ak[c];
        if (dv) dv[base + (long long)key * dh + c] = av[c];
      }
    }
  }
}

}  // namespace capstep_attn

#define CAPSTEP_ATTN_KERNELS(T, TN, D, R)                                                                          \
  extern "C" __global__ void __launch_bounds__(R) capstep_attn_fwd_##TN##_d##D(                                   \
      const T* q, const T* k, const T* v, const T* o, const T* dout, T* res0, T* res1, T* lse, T* delta, int t,     \
      int dh, T scale) {                                                                                           \
    capstep_attn::fwd<T, D, R>(q, k, v, res0, t, dh, scale);                                                       \
  }                                                                                                                \
  extern "C" __global__ void __launch_bounds__(R) capstep_attn_dq_##TN##_d##D(                                    \
      const T* q, const T* k, const T* v, const T* o, const T* dout, T* res0, T* res1, T* lse, T* delta, int t,     \
      int dh, T scale) {                                                                                           \
    capstep_attn::dq<T, D, R>(q, k, v, o, dout, res0, lse, delta, t, dh, scale);                                   \
  }                                                                                                                \
  extern "C" __global__ void __launch_bounds__(R) capstep_attn_dkv_##TN##_d##D(                                   \
      const T* q, const T* k, const T* v, const T* o, const T* dout, T* res0, T* res1, T* lse, T* delta, int t,     \
      int dh, T scale) {                                                                                           \
    capstep_attn::dkv<T, D, R>(q, k, v, dout, res0, res1, lse, delta, t, dh, scale);                               \
  }

)CUDA";

}  // namespace

AttentionLaunch attention_launch(const Type& q) {
  if (q.rank() != 4 || !is_float(q.dtype)) throw Error("attention kernels: q must be a float [B,H,T,Dh], got " + q.str());
  if (q.dtype == DType::bf16)
    throw Error("attention kernels: no bf16 attention kernels (f32 and f64 only), got " + q.str() +
                " (optim::mixed_precision_bf16 keeps attention in f32)");
  AttentionLaunch a;
  const int64_t dh = q.shape[3], t = q.shape[2];
  if (dh > 128) throw Error("attention kernels: Dh is " + std::to_string(dh) + ", the GPU kernels take Dh up to 128 (" + q.str() + ")");
  if (dh < 1) throw Error("attention kernels: Dh must be at least 1 (" + q.str() + ")");
  a.width = dh <= 32 ? 32 : dh <= 64 ? 64 : 128;
  const size_t elem = dtype_size(q.dtype);
  a.rows = rows_for(a.width, elem);
  a.heads = q.shape[0] * q.shape[1];
  if (t > INT_MAX / 2) throw Error("attention kernels: T = " + std::to_string(t) + " is too long (" + q.str() + ")");
  a.t = static_cast<int>(t);
  a.dh = static_cast<int>(dh);
  const int64_t tiles = (t + a.rows - 1) / a.rows;
  const int64_t blocks = a.heads * tiles;
  if (blocks > INT_MAX) throw Error("attention kernels: " + std::to_string(blocks) + " blocks do not fit one grid (" + q.str() + ")");
  a.blocks = static_cast<unsigned>(blocks);
  const std::string suffix = std::string(q.dtype == DType::f32 ? "f32" : "f64") + "_d" + std::to_string(a.width);
  a.fwd = "capstep_attn_fwd_" + suffix;
  a.dq = "capstep_attn_dq_" + suffix;
  a.dkv = "capstep_attn_dkv_" + suffix;
  a.scratch_bytes = static_cast<size_t>(2 * a.heads * t) * elem;
  return a;
}

std::string attention_module_source(const std::vector<Type>& qs) {
  std::set<std::pair<DType, int>> made;
  std::string r = kSource;
  for (const Type& q : qs) {
    const AttentionLaunch a = attention_launch(q);
    if (!made.insert({q.dtype, a.width}).second) continue;
    const bool f = q.dtype == DType::f32;
    r += std::string("CAPSTEP_ATTN_KERNELS(") + (f ? "float, f32, " : "double, f64, ") + std::to_string(a.width) + ", " +
         std::to_string(a.rows) + ")\n";
  }
  return r;
}

}  // namespace capstep::plan
