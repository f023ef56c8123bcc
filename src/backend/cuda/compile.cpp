// Compiling a Program for the device: one launch per equation (a kernel, a
// device copy, or a cuBLAS call), or per loop group when fused
// (fused_launch.cpp), with every address, walk and GEMM layout resolved now,
// so that a step only enqueues. The switch over Op has no
// default: a primitive without a CUDA kernel is a build error.
#include <algorithm>
#include <cstdio>

#include "backend/cuda/check.h"
#include "backend/cuda/executable_impl.h"
#include "backend/cuda/nccl.h"
#include "backend/plan/walk.h"
#include "capstep/array.h"

namespace capstep::cuda {

void Executable::Impl::fill_statics() {
  for (int d = 0; d < static_cast<int>(prog.eqns.size()); ++d) {
    const Eqn& e = prog.eqns[static_cast<size_t>(d)];
    if (e.op != Op::constant && e.op != Op::iota) continue;
    const Type& t = prog.type(e.out);
    const int64_t n = t.numel();
    std::vector<double> v(static_cast<size_t>(n));
    if (e.op == Op::constant) {
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = e.attrs.literal.size() == 1 ? e.attrs.literal[0]
                                                                  : e.attrs.literal[static_cast<size_t>(i)];
    } else {
      int64_t inner = 1;
      for (size_t d = static_cast<size_t>(e.attrs.axis) + 1; d < t.shape.size(); ++d) inner *= t.shape[d];
      const int64_t size = t.shape[static_cast<size_t>(e.attrs.axis)];
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i / inner) % size);
    }
    const Array a = Array::from_doubles(t, v);
    if (a.bytes() > 0)
      CAPSTEP_CU(cudaMemcpy(value_addr(e.out), a.raw(), a.bytes(), cudaMemcpyHostToDevice), "filling " + eqn_what(d));
  }
}

void Executable::Impl::build_launches() {
  Impl* self = this;
  launches.push_back({-1, [self] {
                        CAPSTEP_CU(cudaMemsetAsync(self->d_err, 0, sizeof(k::DeviceError), self->stream),
                                   "(resetting the device error flag)");
                      }});
  lt_gemm.resize(prog.eqns.size());
  if (persist_kernel) add_persistent_launch();  // every generated kernel, as phases of one
  int last_single = -1;  // a single equation may be several items (packs, gemm): launched once
  for (const plan::Item& it : kp.items) {
    if (persist_kernel) break;  // (persistent_blocker: nothing but generated kernels and end copies)
    switch (it.kind) {
      case plan::ItemKind::loop: case plan::ItemKind::row: case plan::ItemKind::col: case plan::ItemKind::wave:
      case plan::ItemKind::small_gemm: case plan::ItemKind::scatter_gen:
        add_generated_launch(it);
        break;
      case plan::ItemKind::end_copy:
        break;  // below, from the memory plan
      case plan::ItemKind::gemm: case plan::ItemKind::pack: case plan::ItemKind::fill: case plan::ItemKind::copy:
      case plan::ItemKind::strided: case plan::ItemKind::elementwise: case plan::ItemKind::reduce:
      case plan::ItemKind::gather: case plan::ItemKind::scatter: case plan::ItemKind::attention: case plan::ItemKind::collective:
        if (it.eqn != last_single) add_single_launch(it);
        last_single = it.eqn;
        break;
    }
  }
  for (const plan::EndCopy& c : plan().end_copies) {
    char* dst = addr(c.to);
    const char* src = addr(c.from);
    const size_t bytes = c.bytes;
    if (dst == src || bytes == 0) continue;
    const std::string what = std::string(c.kind == plan::EndCopy::snapshot ? "saving input \"" : "copying back into input \"") +
                             prog.inputs[static_cast<size_t>(c.input)].name + "\"";
    launches.push_back({-1, [self, dst, src, bytes, what] {
                          CAPSTEP_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, self->stream),
                                     "(" + what + ")");
                        }});
  }
}

void Executable::Impl::add_single_launch(const plan::Item& item) {
  Impl* self = this;
  const int d = item.eqn;
  {
    const Eqn& e = prog.eqns[static_cast<size_t>(d)];
    const Type& ot = prog.type(e.out);
    const int64_t n = ot.numel();
    const std::string what = eqn_what(d);
    char* out = value_addr(e.out);
    std::vector<char*> in;
    for (int x : e.inputs) in.push_back(value_addr(x));
    auto kernel = [&](std::function<cudaError_t()> f) {
      launches.push_back({d, [f, what] { check(f(), "kernel launch", "in " + what); }});
    };
    auto device_copy = [&](char* dst, const char* src, size_t bytes) {
      if (dst == src || bytes == 0) return;
      launches.push_back({d, [self, dst, src, bytes, what] {
                            CAPSTEP_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, self->stream),
                                       "in " + what);
                          }});
    };
    cudaStream_t* st = &stream;
    switch (e.op) {
      case Op::constant:
      case Op::iota:
      case Op::reshape:
        break;  // statics filled once; a reshape is a view of its operand
      CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP) {
        const BinaryOp f = binary_op(e.op);
        const DType t = ot.dtype;
        kernel([=] { return k::binary(*st, f, t, in[0], in[1], out, n); });
        break;
      }
      CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP) {
        const UnaryOp f = unary_op(e.op);
        const DType t = ot.dtype;
        kernel([=] { return k::unary(*st, f, t, in[0], out, n); });
        break;
      }
      case Op::compare: {
        const int c = static_cast<int>(e.attrs.cmp);
        const DType t = prog.type(e.inputs[0]).dtype;
        kernel([=] { return k::compare(*st, c, t, in[0], in[1], out, n); });
        break;
      }
      case Op::select: {
        const size_t w = dtype_size(ot.dtype);
        kernel([=] { return k::select(*st, w, in[0], in[1], in[2], out, n); });
        break;
      }
      case Op::convert: {
        const DType from = prog.type(e.inputs[0]).dtype, to = ot.dtype;
        if (from == to) device_copy(out, in[0], ot.bytes());
        else kernel([=] { return k::convert(*st, from, to, in[0], out, n); });
        break;
      }
      case Op::broadcast_in_dim: {
        const Type& it = prog.type(e.inputs[0]);
        if (it.numel() == n) {
          device_copy(out, in[0], ot.bytes());  // only size-1 axes appear: the bytes are the same
        } else {
          const k::Walk w = plan::broadcast_walk(it.shape, ot.shape, e.attrs.dims, what);
          const size_t eb = dtype_size(ot.dtype);
          kernel([=] { return k::strided_copy(*st, eb, in[0], out, w, n); });
        }
        break;
      }
      case Op::transpose: {
        const Type& it = prog.type(e.inputs[0]);
        if (plan::transpose_moves_nothing(it.shape, e.attrs.dims)) {
          device_copy(out, in[0], ot.bytes());
        } else {
          const k::Walk w = plan::transpose_walk(it.shape, e.attrs.dims, what);
          const size_t eb = dtype_size(ot.dtype);
          kernel([=] { return k::strided_copy(*st, eb, in[0], out, w, n); });
        }
        break;
      }
      case Op::dot_general: {
        const plan::GemmLayout& g = kp.gemm[static_cast<size_t>(d)];
        if (n == 0) break;
        if (g.k == 0) {
          launches.push_back({d, [self, out, bytes = ot.bytes(), what] {
                                CAPSTEP_CU(cudaMemsetAsync(out, 0, bytes, self->stream), "in " + what);
                              }});
          break;
        }
        // the operands' dtype: bf16 operands (2 bytes, packed as they are) give an f32 result
        const DType dt_in = prog.type(e.inputs[0]).dtype;
        const size_t eb = dtype_size(dt_in);
        const char* a = in[0];
        const char* b = in[1];
        char* scratch = addr(plan().scratch_loc[static_cast<size_t>(d)].at(0));
        if (g.a.pack) {
          const k::Walk w = plan::transpose_walk(prog.type(e.inputs[0]).shape, g.a.perm, what);
          const int64_t na = prog.type(e.inputs[0]).numel();
          const char* src = a;
          kernel([=] { return k::strided_copy(*st, eb, src, scratch, w, na); });
          a = scratch;
        }
        if (g.b.pack) {
          const k::Walk w = plan::transpose_walk(prog.type(e.inputs[1]).shape, g.b.perm, what);
          const int64_t nb = prog.type(e.inputs[1]).numel();
          const char* src = b;
          char* dst = scratch + g.a.scratch_bytes;
          kernel([=] { return k::strided_copy(*st, eb, src, dst, w, nb); });
          b = dst;
        }
        for (int64_t v : {g.m, g.n, g.k, g.batch, g.a.ld, g.b.ld})
          if (v > 2147483647) throw Error(what + ": a GEMM dimension exceeds 2^31-1");
        // cuBLASLt with an algorithm chosen now, without split-K where one
        // exists (one kernel); the cuBLAS call below where cuBLASLt refuses.
        if (opt.lt_gemm) {
          try {
            lt_gemm[static_cast<size_t>(d)] =
                std::make_unique<LtGemm>(lt, g, dt_in, opt.tf32, d_workspace, workspace_bytes, what);
          } catch (const Error& ex) {
            std::fprintf(stderr, "capstep cuda: cuBLASLt refused %s, using cublasGemmStridedBatchedEx: %s\n",
                         what.c_str(), ex.what());
          }
        }
        if (const LtGemm* lg = lt_gemm[static_cast<size_t>(d)].get()) {
          launches.push_back({d, [self, lg, a, b, out] { lg->enqueue(self->stream, a, b, out); }});
          break;
        }
        const bool f64 = ot.dtype == DType::f64;
        const cudaDataType dt = f64 ? CUDA_R_64F : CUDA_R_32F;              // the result's and the scale's
        const cudaDataType dab = dt_in == DType::bf16 ? CUDA_R_16BF : dt;  // the operands'
        // (bf16 operands: f32 accumulation, never TF32: cuBLAS takes only COMPUTE_32F for 16BF x 16BF -> 32F)
        const cublasComputeType_t ct =
            f64 ? CUBLAS_COMPUTE_64F : (opt.tf32 && dt_in == DType::f32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
        // Row-major C = A*B is column-major C^T = B^T * A^T: B comes first.
        const cublasOperation_t opb = g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
        const cublasOperation_t opa = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
        launches.push_back({d, [self, g, a, b, out, f64, dt, dab, ct, opa, opb, what] {
                              const float one_f = 1.0f, zero_f = 0.0f;
                              const double one_d = 1.0, zero_d = 0.0;
                              const void* alpha = f64 ? static_cast<const void*>(&one_d) : &one_f;
                              const void* beta = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
                              CAPSTEP_CU(cublasGemmStridedBatchedEx(
                                             self->blas, opb, opa, static_cast<int>(g.n), static_cast<int>(g.m),
                                             static_cast<int>(g.k), alpha, b, dab, static_cast<int>(g.b.ld),
                                             g.b.batch_stride, a, dab, static_cast<int>(g.a.ld), g.a.batch_stride, beta,
                                             out, dt, static_cast<int>(g.n), g.m * g.n, static_cast<int>(g.batch), ct,
                                             CUBLAS_GEMM_DEFAULT),
                                         "in " + what);
                            }});
        break;
      }
      case Op::reduce_sum: case Op::reduce_max: {
        const plan::ReduceWalks rw = plan::reduce_walks(prog.type(e.inputs[0]).shape, e.attrs.dims, what);
        const bool mx = e.op == Op::reduce_max;
        const DType t = ot.dtype;
        kernel([=] { return k::reduce(*st, mx, t, in[0], out, rw.kept, rw.n_out, rw.reduced, rw.n_red); });
        break;
      }
      case Op::gather_rows: {
        const Type& tt = prog.type(e.inputs[0]);
        const int64_t rows = tt.shape[0], row_elems = tt.numel() / std::max<int64_t>(rows, 1);
        const int64_t rel = rows == 0 ? 0 : row_elems;
        const int64_t n_idx = prog.type(e.inputs[1]).numel();
        const size_t eb = dtype_size(tt.dtype);
        k::DeviceError* err = d_err;
        kernel([=] {
          return k::gather_rows(*st, eb, in[0], reinterpret_cast<const int32_t*>(in[1]), out, rows, n_idx, rel, err, d);
        });
        break;
      }
      case Op::scatter_add_rows: {
        const Type& tt = prog.type(e.inputs[0]);
        const int64_t rows = tt.shape[0], row_elems = tt.numel() / std::max<int64_t>(rows, 1);
        const int64_t n_idx = prog.type(e.inputs[1]).numel();
        const DType t = ot.dtype;
        k::DeviceError* err = d_err;
        device_copy(out, in[0], ot.bytes());
        kernel([=] {
          return k::scatter_add_rows(*st, t, out, reinterpret_cast<const int32_t*>(in[1]), in[2], rows, n_idx,
                                     row_elems, err, d);
        });
        break;
      }
      case Op::attention: case Op::attention_grad:
        add_attention_launch(item);
        break;
      case Op::adamw:  // the executable plans expand_adamw's program: never here
        throw Error(what + ": adamw reached the CUDA backend unexpanded (expand_adamw first)");
      case Op::slice: {
        const Type& it = prog.type(e.inputs[0]);
        const plan::OffsetWalk w = plan::slice_walk(it.shape, ot.shape, e.attrs.starts, e.attrs.strides, what);
        const size_t eb = dtype_size(ot.dtype);
        const char* src = in[0] + static_cast<size_t>(w.offset) * eb;
        kernel([=] { return k::strided_copy(*st, eb, src, out, w.walk, n); });
        break;
      }
      case Op::pad: {
        const Type& it = prog.type(e.inputs[0]);
        if (n == 0) break;
        launches.push_back({d, [self, out, bytes = ot.bytes(), what] {
                              CAPSTEP_CU(cudaMemsetAsync(out, 0, bytes, self->stream), "in " + what);
                            }});
        const plan::OffsetWalk w = plan::embed_walk(it.shape, ot.shape, e.attrs.lows, what);
        const size_t eb = dtype_size(ot.dtype);
        const int64_t n_in = it.numel();
        const char* src = in[0];
        char* dst = out + static_cast<size_t>(w.offset) * eb;
        kernel([=] { return k::strided_store(*st, eb, src, dst, w.walk, n_in); });
        break;
      }
      case Op::concatenate: {
        const size_t ax = static_cast<size_t>(e.attrs.axis);
        const size_t eb = dtype_size(ot.dtype);
        std::vector<int64_t> at(ot.shape.size(), 0);
        for (size_t i = 0; i < e.inputs.size(); ++i) {
          const Type& it = prog.type(e.inputs[i]);
          const plan::OffsetWalk w = plan::embed_walk(it.shape, ot.shape, at, what);
          const int64_t n_in = it.numel();
          const char* src = in[i];
          char* dst = out + static_cast<size_t>(w.offset) * eb;
          if (n_in > 0) kernel([=] { return k::strided_store(*st, eb, src, dst, w.walk, n_in); });
          at[ax] += it.shape[ax];
        }
        break;
      }
      case Op::all_reduce:
#ifdef CAPSTEP_HAVE_NCCL
        // With NCCL: the sum over the replicas, enqueued on the step's stream
        // (captured into the step's graph like every other launch).
        if (opt.nccl != nullptr) {
          const NcclCommunicator* nc = opt.nccl;
          const char* src = in[0];
          const DType t = ot.dtype;
          launches.push_back({d, [self, nc, src, out, n, t] { nc->all_reduce_sum(src, out, n, t, self->stream); }});
          break;
        }
#endif
        // Without a communicator one process is one replica: the sum over
        // replicas is its own value. (The CUDA backend refuses a
        // BackendOptions::communicator of several ranks when NCCL is not built.)
        device_copy(out, in[0], ot.bytes());
        break;
    }
  }
}

}  // namespace capstep::cuda
