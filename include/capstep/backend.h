// One interface for running a Program on a device, with state that stays
// there: the host interpreter, the CUDA executor and an XLA device through a
// PJRT plugin each implement it, and the lanes, `capstep bench` and `capstep
// train` are written once over it.
//
// Every input of the Program has a slot that lives where the backend computes
// (host memory, device memory, a plugin's buffer). set_input() fills a slot,
// which keeps its value until it is set again; run() runs the Program once on
// the slots. An output that Program::aliases pairs with an input is donated:
// run() leaves it in that input's slot, so the next run() reads the updated
// value without anything crossing the host (a parameter and its moments under
// optim::with_adamw). read_output() and read_input() copy a value back to the
// host.
//
// Inputs and outputs are addressed by index (Program::inputs / outputs order)
// or by name; a name the Program lacks, an index out of range, or an Array of
// the wrong type is an Error that names the input or output.
//
// run(events) says, while it runs, when an output is final and when an input
// is read no more, so that a caller overlaps its own work with the rest of
// the run (the host lane starts each parameter's AdamW update on idle host
// threads as soon as its gradient is there). supports() says whether a
// backend runs a program here, and why not, before anything is compiled.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/backend_options.h"
#include "capstep/ir.h"

namespace capstep {

enum class BackendKind { host, cuda, pjrt };
const char* backend_name(BackendKind k);           // "host", "cuda", "pjrt"
BackendKind parse_backend(const std::string& s);   // Error naming the allowed values

// What a backend says about itself, for reports.
struct BackendInfo {
  std::string device;  // "host (2 threads)", "NVIDIA H200 (sm_90, 139 GiB)", "PJRT cpu (plugin ...)"
  std::string plan;    // how the program runs: fusion groups, kernels and launches, the compiler
  size_t bytes = 0;    // memory this backend holds for the program, the slots included
  // How the program's all_reduce equations reach the other replicas
  // (BackendOptions::communicator): "NCCL 2.28.9" on CUDA, "Communicator" on
  // the host; empty where no communicator carries them (none given, PJRT, a
  // CUDA program without all_reduce, or a CUDA build without NCCL on one rank).
  std::string collective;
};

// Whether a backend runs a program here: ok, or why not.
struct Support {
  bool ok = true;
  std::string why;  // empty when ok: "no CUDA device", "a bf16 attention (equation 3: ...)"
  explicit operator bool() const { return ok; }
};

// What a run tells while it runs (Backend::run(events)), on the calling
// thread, between its steps; each is called once per index per run:
//  - output_ready(j): output j's value is final. read_output(j) may be
//    called inside the callback, and host_output(j) read, on any thread,
//    until the next run().
//  - input_released(i): the run reads input i's slot no more. A write
//    through host_input(i) may start then, on any thread, unless the input
//    is donated (its slot is its output's, which the run may still write).
// The host backend calls them as its steps go (Interpreter's run events:
// an output as soon as the step that writes it last has run, an input after
// the last step that reads it). CUDA and PJRT run a program as one launch or
// one execution: they call every output_ready, then every input_released,
// once the run has finished.
struct RunEvents {
  std::function<void(int output)> output_ready;
  std::function<void(int input)> input_released;
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // The Program as the backend runs it (verified; the CUDA backend may have
  // reordered its equations).
  virtual const Program& program() const = 0;
  virtual BackendKind kind() const = 0;
  virtual BackendInfo describe() const = 0;

  // Copies `a` into input i's slot. Error when `a`'s type is not the input's.
  void set_input(int i, const Array& a);
  // The same, taking `a`'s memory where the slot is an Array in host memory
  // (the host backend: no copy, `a` is left empty), else copying it.
  void set_input(int i, Array&& a);
  // Input i read by the following runs straight from `a`, not copied, until
  // it is set or borrowed again: `a` must outlive those runs and is not
  // written by them. Where the backend cannot (its slots live on a device or
  // in a plugin's buffers, or the input is donated) it returns false and does
  // nothing: set_input then. Error when `a`'s type is not the input's.
  bool borrow_input(int i, const Array& a);
  // Runs the Program once on the slots. Every slot must have been set at
  // least once (Error naming the first that was not). Donated outputs go
  // into their inputs' slots; the others are kept until the next run().
  void run();
  // The same, calling `events` as the run goes (RunEvents above).
  void run(const RunEvents& events);
  // Copies output j of the last run() to `dst` (retyped when its type
  // differs, else written in place without allocating). Error before the
  // first run().
  void read_output(int j, Array& dst);
  // Copies the current value of input i's slot to `dst` (as read_output).
  void read_input(int i, Array& dst);
  int runs() const { return runs_; }

  // Where a backend's slots are Arrays in host memory (the host backend):
  // input i's slot itself, which the caller may read and write in place
  // between runs (no copy; as set_input, but the values are the caller's to
  // write, the type stays), and output j of the last run. nullptr on a
  // backend whose slots live elsewhere (a device, a plugin's buffers), or
  // before the input was first set / the first run. Valid until the backend
  // is destroyed.
  virtual Array* host_input(int i) { (void)i; return nullptr; }
  // Gives back the memory the backend uses only while it runs (the host's
  // arena of intermediate values) until the next run touches it again, for
  // other work to use meanwhile; the bytes given back (0 where it holds none).
  virtual size_t release_scratch() { return 0; }
  virtual const Array* host_output(int j) const { (void)j; return nullptr; }

  // Whether this backend (its device, plugin and options) would run `p`;
  // what capstep::supports(kind(), p, options) says.
  virtual Support supports(const Program& p) const = 0;

  // By name: Error naming the Program and the missing name.
  int input(const std::string& name) const;
  int output(const std::string& name) const;
  void set(const std::string& input_name, const Array& a) { set_input(input(input_name), a); }
  void read(const std::string& output_name, Array& dst) { read_output(output(output_name), dst); }
  Array read(const std::string& output_name) {
    Array a;
    read(output_name, a);
    return a;
  }

 protected:
  // What each backend implements; the public calls above have checked the
  // index, the type, that every slot is set and that a run happened.
  virtual void set_slot(int i, const Array& a) = 0;
  virtual void move_slot(int i, Array&& a) { set_slot(i, a); }
  virtual bool borrow_slot(int i, const Array& a) { (void)i; (void)a; return false; }
  virtual void execute() = 0;
  // execute() calling `events` as the run goes; by default every
  // output_ready after execute(), then every input_released.
  virtual void execute(const RunEvents& events);
  virtual void get_output(int j, Array& dst) = 0;  // dst already has the output's type
  virtual void get_input(int i, Array& dst) = 0;   // dst already has the input's type

 private:
  void check_input(int i, const Array& a) const;  // Error for a bad index or type
  void mark_set(int i);
  void require_every_input_set();  // Error naming the first input never set
  std::vector<char> set_;  // per input: set at least once
  int runs_ = 0;
};

// Compiles `p` for `kind` with the switches in `o` (o.host, o.cuda, o.pjrt)
// and the replicas in o.communicator, the same for every kind. Data parallel:
// every rank makes its backend at the same point in its run (the CUDA
// backend's NCCL set-up is a collective over the communicator's ranks).
// Errors: no device or plugin (the reason, e.g. "no CUDA device"), a program
// the backend cannot run, a compile failure (the compiler's message), a
// communicator of several replicas that the backend cannot sum over (PJRT;
// CUDA built without NCCL).
std::unique_ptr<Backend> make_backend(BackendKind kind, Program p, const BackendOptions& o = {});

// Whether `kind` can run here; when not, *why says what is missing ("no CUDA
// device", "no PJRT plugin: BackendOptions::pjrt.plugin is empty").
bool backend_available(BackendKind kind, const BackendOptions& o, std::string* why = nullptr);

// Whether make_backend(kind, p, o) would run `p` here: the backend is
// available (backend_available), and it has kernels for every equation of
// `p` (the host's and the CUDA backend's attention kernels are f32 and f64
// only: a bf16 attention is refused; PJRT lowers every verified program).
// The answer comes before anything is compiled; the program is checked
// first, so its part of the answer is the same with or without a device.
Support supports(BackendKind kind, const Program& p, const BackendOptions& o = {});

}  // namespace capstep
