// MpiCommunicator: see mpi_communicator.h.
#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <thread>

namespace capstep::dist {
namespace {

std::string mpi_error(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

void check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw Error(std::string(what) + ": " + mpi_error(code));
}

}  // namespace

MpiCommunicator::MpiCommunicator(double timeout_s) : timeout_s_(timeout_s) {
  int inited = 0;
  check(MPI_Initialized(&inited), "MPI_Initialized");
  if (!inited) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    finalize_ = true;
  }
  // Errors come back as codes (then an Error), not as MPI's default abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  if (finalize_) MPI_Finalize();
}

void MpiCommunicator::all_reduce_sum(void* data, DType dtype, int64_t n) {
  MPI_Datatype t = MPI_FLOAT;
  switch (dtype) {
    case DType::f32: t = MPI_FLOAT; break;
    case DType::f64: t = MPI_DOUBLE; break;
    case DType::i32: case DType::i1:
      throw Error(std::string("all_reduce: sums floats only, got ") + dtype_name(dtype));
    case DType::bf16:  // (mixed precision keeps gradients f32: none is bf16)
      throw Error("all_reduce: bf16 has no MPI datatype; sum the f32 gradients instead");
  }
  if (n < 0 || n > INT_MAX) throw Error("all_reduce: " + std::to_string(n) + " elements exceed one MPI message (int count)");
  if (n == 0) return;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  MPI_Request req = MPI_REQUEST_NULL;
  check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), t, MPI_SUM, MPI_COMM_WORLD, &req), "MPI_Iallreduce");
  // Poll: spin briefly (a step's collective usually completes within
  // microseconds), then yield the core with short sleeps.
  for (int polls = 0;; ++polls) {
    int done = 0;
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test (all_reduce)");
    if (done) return;
    if (Clock::now() > deadline) {
      char msg[256];
      std::snprintf(msg, sizeof msg,
                    "all_reduce: rank %d waited %.1f s for the other %d rank(s) of the data-parallel run without an "
                    "answer: a rank died or hangs; stopping (--dp-timeout sets the wait)",
                    rank_, timeout_s_, size_ - 1);
      throw Error(msg);
    }
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(polls > 100000 ? 1000 : 50));
  }
}

void MpiCommunicator::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; if it did, still end here
}

}  // namespace capstep::dist
