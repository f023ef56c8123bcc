// The communicator behind Op::all_reduce: how the replicas of a data-parallel
// run reach each other. The host interpreter calls it for every all_reduce
// equation (host::Interpreter::set_communicator); without one, a process is
// one replica and all_reduce is the identity.
//
// capstep ships one implementation over MPI (capstep/mpi.h, built when CMake
// finds MPI). Tests may implement it in-process.
#pragma once

#include <cstdint>

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
};

}  // namespace capstep
