// The Backend contract's own calls (backend.h): names, slots by name, the
// checks around set_input, run and the reads. make_backend is in registry.cpp.
#include "capstep/backend.h"

namespace capstep {

const char* backend_name(BackendKind k) {
  switch (k) {
    case BackendKind::host: return "host";
    case BackendKind::cuda: return "cuda";
    case BackendKind::pjrt: return "pjrt";
  }
  return "?";
}

BackendKind parse_backend(const std::string& s) {
  for (BackendKind k : {BackendKind::host, BackendKind::cuda, BackendKind::pjrt})
    if (s == backend_name(k)) return k;
  throw Error("unknown backend \"" + s + "\": the backends are host, cuda and pjrt");
}

int Backend::input(const std::string& name) const {
  const int i = program().input_index(name);
  if (i < 0) throw Error("program \"" + program().name + "\" has no input \"" + name + "\"");
  return i;
}

int Backend::output(const std::string& name) const {
  const int j = program().output_index(name);
  if (j < 0) throw Error("program \"" + program().name + "\" has no output \"" + name + "\"");
  return j;
}

void Backend::check_input(int i, const Array& a) const {
  const Program& p = program();
  if (i < 0 || static_cast<size_t>(i) >= p.inputs.size())
    throw Error("program \"" + p.name + "\" has no input " + std::to_string(i) + " (it has " +
                std::to_string(p.inputs.size()) + ")");
  const Type& want = p.input_type(i);
  if (a.type() != want)
    throw Error("input \"" + p.inputs[static_cast<size_t>(i)].name + "\" of program \"" + p.name + "\" is " +
                want.str() + ", given " + a.type().str());
}

void Backend::mark_set(int i) {
  if (set_.size() != program().inputs.size()) set_.assign(program().inputs.size(), 0);
  set_[static_cast<size_t>(i)] = 1;
}

void Backend::set_input(int i, const Array& a) {
  check_input(i, a);
  set_slot(i, a);
  mark_set(i);
}

void Backend::set_input(int i, Array&& a) {
  check_input(i, a);
  move_slot(i, std::move(a));
  mark_set(i);
}

bool Backend::borrow_input(int i, const Array& a) {
  check_input(i, a);
  if (!borrow_slot(i, a)) return false;
  mark_set(i);
  return true;
}

void Backend::require_every_input_set() {
  const Program& p = program();
  if (set_.size() != p.inputs.size()) set_.assign(p.inputs.size(), 0);
  for (size_t i = 0; i < p.inputs.size(); ++i)
    if (!set_[i])
      throw Error("program \"" + p.name + "\": input \"" + p.inputs[i].name + "\" was never set before run()");
}

void Backend::run() {
  require_every_input_set();
  execute();
  ++runs_;
}

void Backend::run(const RunEvents& events) {
  require_every_input_set();
  // Counted before the events: an output_ready callback may read the output.
  ++runs_;
  try {
    execute(events);
  } catch (...) {
    --runs_;
    throw;
  }
}

void Backend::execute(const RunEvents& events) {
  execute();
  const Program& p = program();
  if (events.output_ready)
    for (size_t j = 0; j < p.outputs.size(); ++j) events.output_ready(static_cast<int>(j));
  if (events.input_released)
    for (size_t i = 0; i < p.inputs.size(); ++i) events.input_released(static_cast<int>(i));
}

void Backend::read_output(int j, Array& dst) {
  const Program& p = program();
  if (j < 0 || static_cast<size_t>(j) >= p.outputs.size())
    throw Error("program \"" + p.name + "\" has no output " + std::to_string(j) + " (it has " +
                std::to_string(p.outputs.size()) + ")");
  if (runs_ == 0)
    throw Error("program \"" + p.name + "\": output \"" + p.outputs[static_cast<size_t>(j)].name +
                "\" read before the first run()");
  const Type& t = p.type(p.outputs[static_cast<size_t>(j)].value);
  if (dst.type() != t || (t.bytes() > 0 && !dst.raw())) dst.reset(t);
  get_output(j, dst);
}

void Backend::read_input(int i, Array& dst) {
  const Program& p = program();
  if (i < 0 || static_cast<size_t>(i) >= p.inputs.size())
    throw Error("program \"" + p.name + "\" has no input " + std::to_string(i) + " (it has " +
                std::to_string(p.inputs.size()) + ")");
  if (set_.size() != p.inputs.size() || !set_[static_cast<size_t>(i)])
    throw Error("program \"" + p.name + "\": input \"" + p.inputs[static_cast<size_t>(i)].name +
                "\" read before it was set");
  const Type& t = p.input_type(i);
  if (dst.type() != t || (t.bytes() > 0 && !dst.raw())) dst.reset(t);
  get_input(i, dst);
}

}  // namespace capstep
