// The communicator behind Op::all_reduce: how the replicas of a data-parallel
// run reach each other. The host interpreter calls it once for every
// all_reduce equation, or once for a pack of them (consecutive all_reduce
// equations: optim::DataParallelOptions::pack) with the pack's values in one
// buffer (host::Interpreter::set_communicator); without one, a process is one
// replica and all_reduce is the identity. It is what every backend takes
// (BackendOptions::communicator): the CUDA backend makes its own NCCL
// communicator from it, whose id goes from rank 0 through broadcast().
//
// capstep ships one implementation over MPI (capstep/mpi.h, built when CMake
// finds MPI). Tests may implement it in-process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capstep/ir.h"

namespace capstep {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;   // this replica, in [0, size())
  virtual int size() const = 0;   // the number of replicas
  // Replaces data[0..n) (dtype f32 or f64) by its elementwise sum over every
  // replica, in the same order on every replica, so that all replicas hold
  // bit-identical results. Every replica must call it with the same n and
  // dtype, in the same sequence. Throws Error when a replica does not answer
  // (a dead or hung rank) or the transport fails.
  virtual void all_reduce_sum(void* data, DType dtype, int64_t n) = 0;
  // Replaces data[0..bytes) on every replica by root's bytes (every replica
  // calls it with the same bytes and root). This default sends each byte as
  // an f64 through all_reduce_sum (root's value plus zeros: exact); an
  // implementation may override it with its transport's broadcast. Used once
  // per run (the NCCL id of the GPU lanes), so the 8x size does not matter.
  virtual void broadcast(void* data, int64_t bytes, int root) {
    if (root < 0 || root >= size()) {
      std::string m = "broadcast: root ";
      m += std::to_string(root);
      m += " is not a replica";
      throw Error(m);
    }
    std::vector<double> v(static_cast<size_t>(bytes), 0.0);
    unsigned char* b = static_cast<unsigned char*>(data);
    if (rank() == root)
      for (int64_t i = 0; i < bytes; ++i) v[static_cast<size_t>(i)] = b[i];
    all_reduce_sum(v.data(), DType::f64, bytes);
    for (int64_t i = 0; i < bytes; ++i) b[i] = static_cast<unsigned char>(v[static_cast<size_t>(i)]);
  }
};

}  // namespace capstep
