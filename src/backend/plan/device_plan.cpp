// plan_device_memory: homes, lifetimes and offsets of every value of a Program
// on the device, and the alias bookkeeping for donated inputs. See
// include/capstep/device_plan.h for the rules; this file applies them in order:
//   1. homes and roots (inputs, statics, reshape views, arena)
//   2. lifetimes per root (reads through any view; outputs live to the end)
//   3. aliases: direct write when provably safe, else copy-back (with a note)
//   4. internal values that would have had an arena buffer: tiles
//   5. snapshots of old input values that outputs still need
//   6. arena packing, then every location resolved
#include "capstep/device_plan.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace capstep::plan {
namespace {

size_t align_up(size_t n) { return (n + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign; }

// Equation d may write into input i's region while it reads input i itself
// only when it is elementwise and every read of input i has the output's
// element width: then element k is read before element k is written, by the
// same thread, and no other element is touched.
bool in_place_ok(const Program& p, const std::vector<ValuePlan>& v, int d, int input_root) {
  const Eqn& e = p.eqns[static_cast<size_t>(d)];
  if (!is_elementwise(e.op)) return false;
  const size_t out_w = dtype_size(p.type(e.out).dtype);
  for (int x : e.inputs)
    if (v[static_cast<size_t>(x)].root == input_root && dtype_size(p.type(x).dtype) != out_w) return false;
  return true;
}

}  // namespace

const char* space_name(Space s) {
  switch (s) {
    case Space::inputs: return "inputs";
    case Space::statics: return "statics";
    case Space::arena: return "arena";
  }
  return "?";
}

const char* home_name(Home h) {
  switch (h) {
    case Home::input: return "input";
    case Home::statics: return "statics";
    case Home::arena: return "arena";
    case Home::donated: return "donated";
    case Home::output: return "output";
    case Home::view: return "view";
    case Home::tile: return "tile";
  }
  return "?";
}

Plan plan_device_memory(const Program& p, const std::vector<size_t>& eqn_scratch) {
  PlanOptions o;
  o.eqn_scratch = eqn_scratch;
  return plan_device_memory(p, o);
}

Plan plan_device_memory(const Program& p, const PlanOptions& opt) {
  verify(p);
  const int E = static_cast<int>(p.eqns.size());
  const std::vector<size_t>& eqn_scratch = opt.eqn_scratch;
  if (!opt.span.empty() && static_cast<int>(opt.span.size()) != E)
    throw Error("plan_device_memory: " + std::to_string(opt.span.size()) + " spans for " + std::to_string(E) +
                " equations");
  if (!opt.internal.empty() && static_cast<int>(opt.internal.size()) != p.num_values())
    throw Error("plan_device_memory: " + std::to_string(opt.internal.size()) + " internal flags for " +
                std::to_string(p.num_values()) + " values");
  // equations that run as one kernel: reads at the span's end, writes from its start
  auto span_first = [&](int d) { return opt.span.empty() ? d : opt.span[static_cast<size_t>(d)].first; };
  auto span_last = [&](int d) { return opt.span.empty() ? d : opt.span[static_cast<size_t>(d)].second; };
  for (int d = 0; d < static_cast<int>(opt.span.size()); ++d)
    if (span_first(d) > d || span_last(d) < d || span_last(d) >= E)
      throw Error("plan_device_memory: equation " + std::to_string(d) + " is outside its span [" +
                  std::to_string(span_first(d)) + ", " + std::to_string(span_last(d)) + "]");
  if (!opt.view.empty() && static_cast<int>(opt.view.size()) != E)
    throw Error("plan_device_memory: " + std::to_string(opt.view.size()) + " view flags for " + std::to_string(E) +
                " equations");
  if (!opt.part.empty() && static_cast<int>(opt.part.size()) != E)
    throw Error("plan_device_memory: " + std::to_string(opt.part.size()) + " parts for " + std::to_string(E) +
                " equations");
  if (!opt.no_in_place.empty() && static_cast<int>(opt.no_in_place.size()) != E)
    throw Error("plan_device_memory: " + std::to_string(opt.no_in_place.size()) + " no_in_place flags for " +
                std::to_string(E) + " equations");
  auto internal = [&](int id) { return !opt.internal.empty() && opt.internal[static_cast<size_t>(id)] != 0; };
  if (!eqn_scratch.empty() && static_cast<int>(eqn_scratch.size()) != E)
    throw Error("plan_device_memory: " + std::to_string(eqn_scratch.size()) + " scratch sizes for " +
                std::to_string(E) + " equations");
  Plan plan;
  plan.num_eqns = E;
  std::vector<ValuePlan>& v = plan.values;
  v.resize(static_cast<size_t>(p.num_values()));
  for (int id = 0; id < p.num_values(); ++id) {
    v[static_cast<size_t>(id)].bytes = p.type(id).bytes();
    v[static_cast<size_t>(id)].root = id;
  }

  // 1. homes
  plan.input_loc.resize(p.inputs.size());
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    ValuePlan& x = v[static_cast<size_t>(p.inputs[i].value)];
    x.home = Home::input;
    x.input = static_cast<int>(i);
    x.loc = {Space::inputs, plan.inputs_bytes};
    plan.input_loc[i] = x.loc;
    plan.inputs_bytes += align_up(x.bytes);
  }
  for (int d = 0; d < E; ++d) {
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    ValuePlan& x = v[static_cast<size_t>(e.out)];
    x.def = d;
    if (!opt.view.empty() && opt.view[static_cast<size_t>(d)] && e.op != Op::reshape) {
      if (e.op != Op::transpose && e.op != Op::convert) throw Error("plan_device_memory: equation " + std::to_string(d) + " (" + op_name(e.op) + ") cannot be a view");
      x.home = Home::view;
      x.root = v[static_cast<size_t>(e.inputs[0])].root;
      continue;
    }
    switch (e.op) {
      case Op::constant: case Op::iota:
        x.home = Home::statics;
        x.loc = {Space::statics, plan.statics_bytes};
        plan.statics_bytes += align_up(x.bytes);
        break;
      case Op::reshape:
        x.home = Home::view;
        x.root = v[static_cast<size_t>(e.inputs[0])].root;
        break;
      // every other op computes into a buffer of its own
      case Op::add: case Op::subtract: case Op::multiply: case Op::divide: case Op::maximum:
      case Op::negate: case Op::exponential: case Op::log: case Op::tanh: case Op::rsqrt:
      case Op::sqrt: case Op::compare: case Op::select: case Op::convert: case Op::broadcast_in_dim:
      case Op::transpose: case Op::dot_general: case Op::reduce_sum: case Op::reduce_max:
      case Op::gather_rows: case Op::scatter_add_rows: case Op::attention: case Op::attention_grad: case Op::adamw:
      case Op::all_reduce: case Op::slice: case Op::pad: case Op::concatenate:
        x.home = Home::arena;
        break;
    }
  }

  // 2. lifetimes, per root
  for (int d = 0; d < E; ++d)
    for (int x : p.eqns[static_cast<size_t>(d)].inputs) {
      ValuePlan& r = v[static_cast<size_t>(v[static_cast<size_t>(x)].root)];
      r.last = std::max(r.last, span_last(d));
    }
  for (const NamedValue& o : p.outputs) v[static_cast<size_t>(v[static_cast<size_t>(o.value)].root)].last = E;

  // 3. aliases
  plan.donated_input.assign(p.outputs.size(), -1);
  std::vector<char> written(p.inputs.size(), 0);
  struct Back { int output, input, root; };
  std::vector<Back> backs;
  for (const Alias& a : p.aliases) {
    const int r = v[static_cast<size_t>(p.outputs[static_cast<size_t>(a.output)].value)].root;
    const int in_root = p.inputs[static_cast<size_t>(a.input)].value;
    const std::string what = "alias output \"" + p.outputs[static_cast<size_t>(a.output)].name + "\" -> input \"" +
                             p.inputs[static_cast<size_t>(a.input)].name + "\"";
    if (r == in_root) continue;  // the output is the input unchanged: nothing to write
    ValuePlan& rv = v[static_cast<size_t>(r)];
    const int last_read = v[static_cast<size_t>(in_root)].last;
    std::string why;
    if (rv.home != Home::arena) {
      why = rv.home == Home::donated ? "its value is already donated to another input"
                                     : std::string("its value lives in ") + home_name(rv.home);
    } else if (last_read == E) {
      why = "the input's old value is itself an output";
    } else if (last_read > span_last(rv.def)) {
      why = "the input is still read by equation " + std::to_string(last_read) + " after equation " +
            std::to_string(rv.def) + " makes the output";
    } else if (last_read == span_last(rv.def)) {
      // read during the kernel that writes the output: every reader there must be in-place safe
      for (int d = span_first(rv.def); d <= span_last(rv.def) && why.empty(); ++d) {
        bool reads = false;
        for (int x : p.eqns[static_cast<size_t>(d)].inputs) reads |= v[static_cast<size_t>(x)].root == in_root;
        const bool once = opt.no_in_place.empty() || !opt.no_in_place[static_cast<size_t>(d)];
        const bool same_part = opt.part.empty() || opt.part[static_cast<size_t>(d)] == opt.part[static_cast<size_t>(rv.def)];
        if (reads && !(once && same_part && in_place_ok(p, v, d, in_root)))
          why = "equation " + std::to_string(d) + " reads the input while equation " + std::to_string(rv.def) +
                " writes the output in the same kernel, and is not an elementwise op of equal widths that reads once";
      }
    }
    if (why.empty()) {
      rv.home = Home::donated;
      rv.input = a.input;
      plan.donated_input[static_cast<size_t>(a.output)] = a.input;
    } else {
      plan.notes.push_back(what + ": computed into the arena and copied back at the end of the step, because " +
                           why);
      backs.push_back({a.output, a.input, r});
    }
    written[static_cast<size_t>(a.input)] = 1;
  }

  // 4. tiles: an internal value lives in its kernel's registers, and gets no
  // buffer below. (No output is internal: plan::internal_values leaves out
  // every value read outside its group.)
  for (int id = 0; id < p.num_values(); ++id)
    if (v[static_cast<size_t>(id)].home == Home::arena && internal(id)) v[static_cast<size_t>(id)].home = Home::tile;

  // 5. snapshots: an output (or a copy-back source) that is the old value of an
  // input overwritten at the end of the step is saved first. (A donated input
  // never needs one: donation requires that nothing reads it after the write.)
  std::vector<Interval> buffers;
  std::vector<int> buffer_value;                 // value id, or -1 for a snapshot / scratch
  std::map<int, size_t> snapshot_of_input;       // input index -> buffer index
  auto snapshot = [&](int input, int output) -> size_t {
    auto it = snapshot_of_input.find(input);
    if (it != snapshot_of_input.end()) return it->second;
    const size_t b = buffers.size();
    buffers.push_back({v[static_cast<size_t>(p.inputs[static_cast<size_t>(input)].value)].bytes, E, E});
    buffer_value.push_back(-1);
    snapshot_of_input[input] = b;
    EndCopy c;
    c.kind = EndCopy::snapshot;
    c.from = plan.input_loc[static_cast<size_t>(input)];
    c.bytes = buffers[b].bytes;
    c.output = output;
    c.input = input;
    plan.end_copies.push_back(c);
    return b;
  };
  std::vector<long> output_snapshot(p.outputs.size(), -1);
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    const ValuePlan& r = v[static_cast<size_t>(v[static_cast<size_t>(p.outputs[o].value)].root)];
    if (r.home == Home::input && written[static_cast<size_t>(r.input)])
      output_snapshot[o] = static_cast<long>(snapshot(r.input, static_cast<int>(o)));
  }

  // 6. arena: roots computed per step (over their writer's span at least: a
  // result nobody reads still gets written), snapshots, scratch
  for (int id = 0; id < p.num_values(); ++id) {
    const ValuePlan& x = v[static_cast<size_t>(id)];
    if (x.home != Home::arena) continue;
    buffers.push_back({x.bytes, span_first(x.def), std::max(x.last, span_last(x.def))});
    buffer_value.push_back(id);
  }
  plan.scratch_loc.assign(static_cast<size_t>(E), Loc{});
  std::vector<std::pair<int, size_t>> scratch_buffer;  // eqn, buffer index
  for (int d = 0; d < static_cast<int>(eqn_scratch.size()); ++d)
    if (eqn_scratch[static_cast<size_t>(d)] > 0) {
      scratch_buffer.emplace_back(d, buffers.size());
      buffers.push_back({eqn_scratch[static_cast<size_t>(d)], span_first(d), span_last(d)});
      buffer_value.push_back(-1);
    }
  const std::vector<size_t> offset = pack(buffers, kDeviceAlign, &plan.arena_bytes);
  for (size_t b = 0; b < buffers.size(); ++b)
    if (buffer_value[b] >= 0) v[static_cast<size_t>(buffer_value[b])].loc = {Space::arena, offset[b]};
  for (const auto& [d, b] : scratch_buffer) plan.scratch_loc[static_cast<size_t>(d)] = {Space::arena, offset[b]};
  for (EndCopy& c : plan.end_copies) c.to = {Space::arena, offset[snapshot_of_input.at(c.input)]};

  // every location resolved: donated roots sit in their input's region, views in their root's
  for (ValuePlan& x : v)
    if (x.home == Home::donated) x.loc = plan.input_loc[static_cast<size_t>(x.input)];
  for (ValuePlan& x : v)
    if (x.home == Home::view) {
      const ValuePlan& r = v[static_cast<size_t>(x.root)];
      x.loc = r.loc;
      x.input = r.input;
    }

  for (const Back& b : backs) {
    EndCopy c;
    c.kind = EndCopy::copy_back;
    const ValuePlan& r = v[static_cast<size_t>(b.root)];
    if (r.home == Home::input && written[static_cast<size_t>(r.input)])
      c.from = {Space::arena, offset[snapshot_of_input.at(r.input)]};
    else
      c.from = r.loc;
    c.to = plan.input_loc[static_cast<size_t>(b.input)];
    c.bytes = r.bytes;
    c.output = b.output;
    c.input = b.input;
    plan.end_copies.push_back(c);
  }

  plan.output_loc.resize(p.outputs.size());
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    if (output_snapshot[o] >= 0)
      plan.output_loc[o] = {Space::arena, offset[static_cast<size_t>(output_snapshot[o])]};
    else
      plan.output_loc[o] = v[static_cast<size_t>(p.outputs[o].value)].loc;
  }
  for (const Alias& a : p.aliases)  // after the step an aliased output is read where it now lives
    plan.output_loc[static_cast<size_t>(a.output)] = plan.input_loc[static_cast<size_t>(a.input)];
  return plan;
}

std::string describe(const Program& p, const Plan& plan) {
  std::ostringstream s;
  auto mib = [](size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  s.setf(std::ios::fixed);
  s.precision(2);
  s << "device plan: inputs " << mib(plan.inputs_bytes) << " MiB, statics " << mib(plan.statics_bytes)
    << " MiB, arena " << mib(plan.arena_bytes) << " MiB, total " << mib(plan.total_bytes()) << " MiB\n";
  int donated = 0;
  for (int d : plan.donated_input) donated += d >= 0;
  s << "aliases: " << p.aliases.size() << " (" << donated << " written in place, "
    << plan.notes.size() << " copied back)\n";
  for (const std::string& n : plan.notes) s << "  " << n << "\n";
  return s.str();
}

}  // namespace capstep::plan
