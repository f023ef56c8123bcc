// The MPI communicator behind data-parallel training on the host
// (`mpirun -np R capstep train --data-parallel`): Op::all_reduce as
// MPI_Iallreduce over MPI_COMM_WORLD, polled with a deadline so that a dead or
// hung rank makes the others stop with a clear message instead of waiting
// forever. Built only when CMake finds MPI (library capstep_mpi, which only
// the capstep command and the tests link: libcapstep itself needs no MPI).
#pragma once

#include "capstep/collective.h"

namespace capstep::dist {

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI (once per process). timeout_s: how long one all_reduce
  // may wait for the other ranks before all_reduce_sum throws.
  explicit MpiCommunicator(double timeout_s);
  ~MpiCommunicator() override;   // MPI_Finalize
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // MPI_Iallreduce(MPI_IN_PLACE, MPI_SUM), then MPI_Test until it completes
  // or timeout_s passes: then Error "all_reduce: rank R waited T s for the
  // other ranks ...". After such an Error, call abort(): the collective is
  // still pending, and MPI_Finalize would wait for it.
  void all_reduce_sum(void* data, DType dtype, int64_t n) override;
  // MPI_Abort(MPI_COMM_WORLD, code): mpirun ends every rank.
  [[noreturn]] void abort(int code);
  double timeout_s() const { return timeout_s_; }

 private:
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  bool finalize_ = false;
};

}  // namespace capstep::dist
