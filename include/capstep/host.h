// The host backend's process-wide setting (its thread count) and what it
// reports about the machine, for code above the backends (the training loop,
// sampling, the lanes' report) that must not include the backend's own
// headers.
#pragma once

#include <string>

#include "capstep/backend_options.h"

namespace capstep::host {

// The threads a host step uses (the caller included); read once per process.
int host_threads();
// "2 threads (of 2 CPUs this process may run on)", "3 threads (set by the program)".
std::string host_threads_line();
// How long a cache line takes to go from the caller's thread to a worker and
// back (ns, measured now); 0 on one thread or when it could not be measured.
double threads_round_trip_ns();
// Replaces the thread pool with one of n threads (BackendOptions::host_threads).
// Only while no step runs.
void set_host_threads(int n);

// The libraries that run the host's GEMMs and the kernel set each picked, in one line.
std::string gemm_line();
// What runs a fused group's elementwise work in a host backend built with o.
std::string host_loops_line(const InterpreterOptions& o);
// Whether this CPU can flush subnormal numbers (InterpreterOptions::flush_subnormals).
bool subnormal_flush_available();

}  // namespace capstep::host
