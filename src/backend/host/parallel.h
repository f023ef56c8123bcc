// The host's worker threads: a step's GEMMs, fused groups and the host AdamW
// update split into parts that the calling thread and the workers share.
//
// Results never depend on the number of threads: how work is cut into parts
// is decided from the shapes alone (host::dot_parts, the fused groups' tile
// ranges), each part does the same arithmetic whichever thread runs it, and
// with one thread the same parts run one after another.
//
// Parts are claimed through one atomic counter, so a worker that is asleep or
// preempted costs nothing: the caller takes the parts nobody claimed. Workers
// spin for a short while after their last part (a step's parallel sections
// are microseconds apart) and then sleep on a futex until the next one.
//
// Threads: the CPUs this process may run on (sched_getaffinity), at most
// kDefaultMaxThreads, unless set_host_threads chose another count
// (BackendOptions::host_threads, which `capstep` and the example take from
// CAPSTEP_HOST_THREADS). The pool is
// process-wide; a run that finds it busy (another thread's step, or a part
// asking for parallelism itself) runs its parts on the calling thread.
#pragma once

#include <algorithm>
#include <type_traits>
#include <cstdint>
#include <string>

#include "capstep/host.h"

namespace capstep::host {

inline constexpr int kDefaultMaxThreads = 4;

// host_threads, host_threads_line, threads_round_trip_ns and
// set_host_threads are declared in capstep/host.h (code above the backends
// reads them there). threads_round_trip_ns: the median of 5 batches of 1000
// round trips. On a VM it tells where its CPUs are, which often decides what
// a second thread gains: two vCPUs on two dies take several times as long as
// two on one, and every GEMM or group reading what the other thread wrote
// pays for it. 0 on one thread, or when the two parts did not run at once
// within 50 ms (nested in another parallel_parts, the pool busy, a worker not
// scheduled). set_host_threads: interpreters built before keep the parts they
// planned (the results do not depend on them).

// Runs f(ctx, i) for every i in [0, parts), in any order, on the caller and
// the pool's workers; returns when all are done. An exception thrown by a part
// is rethrown on the caller (the first one; the other parts still run).
void parallel_parts(int parts, void (*f)(void* ctx, int part), void* ctx);

// Work for the threads' idle moments: chunks 0, 1, 2, ... of f(ctx, chunk),
// each run once, made available in order by release(n) (chunks [0, n)).
// The pool's workers take released chunks when they have no parts to run,
// and the caller of parallel_parts while it waits for the workers' parts;
// finish() runs what is left on every thread and returns when all released
// chunks are done, rethrowing the first exception of one. Meant for work
// that can start before a step ends (lane 1's AdamW, one parameter at a
// time as the interpreter's run makes its gradient: Interpreter::RunEvents),
// in chunks of about a microsecond, so that a worker is never long away from
// the parts of the step. A chunk must not touch what the step still reads
// or writes; it may run on any thread, in any order among released chunks.
// One at a time per process: while one is under way (or on one thread), a
// second runs all its chunks in its finish(), on the calling thread, as does
// a Background whose pool has one thread. The destructor finishes (dropping
// an exception); f and ctx must outlive finish().
class Background {
 public:
  Background(void (*f)(void* ctx, int chunk), void* ctx);
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  void release(int n);  // chunks [0, n) may run (n only grows; a smaller n does nothing)
  void finish();
  bool on_idle_threads() const { return pool_ != nullptr; }  // false: everything runs in finish()
  int done_so_far() const;  // chunks that have run (before finish(): on idle threads)

 private:
  void (*f_)(void*, int);
  void* ctx_;
  void* pool_ = nullptr;
  unsigned mode_;  // the float mode of the thread that made it (SubnormalMode): its chunks run in it
  int released_ = 0;
  bool finished_ = false;
};

// The host's arithmetic on subnormal numbers for a scope of the calling
// thread: flush (x86's DAZ and FTZ: a subnormal f32 or f64 operand reads as
// zero, a result that would be subnormal is zero, as XLA's CPU client
// computes) or IEEE's gradual underflow; the thread's own mode comes back at
// the end of the scope (the sticky exception flags are left as the run set
// them). The pool's workers take the caller's mode with each parallel_parts
// task, and a Background's chunks the mode of the thread that made it, so
// results never depend on which thread ran a part. Threads of others (an
// OpenBLAS built with its own threads, when OPENBLAS_NUM_THREADS > 1) keep
// theirs. Where the CPU has no such mode (not x86) the scope changes nothing.
class SubnormalMode {
 public:
  explicit SubnormalMode(bool flush);
  ~SubnormalMode();
  SubnormalMode(const SubnormalMode&) = delete;
  SubnormalMode& operator=(const SubnormalMode&) = delete;
  static bool available();  // false: this CPU keeps IEEE's subnormals whatever the scope says

 private:
  unsigned saved_;
};

// The same with a callable, without allocating.
template <class F>
void parallel_parts(int parts, F&& f) {
  using Fn = std::remove_reference_t<F>;  // a named callable (an lvalue) too
  parallel_parts(parts, [](void* c, int i) { (*static_cast<Fn*>(c))(i); }, const_cast<void*>(static_cast<const void*>(&f)));
}

// [begin, end) of part i when n items are cut into `parts` nearly equal runs,
// each a multiple of `align` items (the last takes the rest).
inline void part_range(int64_t n, int parts, int i, int64_t align, int64_t& begin, int64_t& end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t b = units * i / parts, e = units * (i + 1) / parts;
  begin = std::min(n, b * align);
  end = std::min(n, e * align);
}

}  // namespace capstep::host
