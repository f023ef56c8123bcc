// plan_memory: homes, lifetimes and offsets of every value of a Program, for
// every backend, and the alias bookkeeping for donated inputs (device). See
// device_plan.h for the rules; this file applies them in order:
//   1. homes and roots (inputs, statics, views, arena)
//   2. lifetimes per root (reads through any view; outputs live to the end)
//   3. aliases: direct write when provably safe, else copy-back (with a note)
//   4. internal values that would have had an arena buffer: tiles
//      (host: then results in place over dying operands, and outputs in the
//      caller's Arrays)
//   5. snapshots of old input values that outputs still need
//   6. arena packing, then every location resolved
#include "backend/plan/device_plan.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <tuple>

namespace capstep::plan {
namespace {

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

Plan plan_memory(const Program& p, const PlanOptions& opt) {
  verify(p);
  const int E = static_cast<int>(p.eqns.size());
  const int V = p.num_values();
  auto count_error = [&](size_t n, const char* what, int want, const char* of) {
    return Error("plan_memory: " + std::to_string(n) + " " + what + " for " + std::to_string(want) + " " + of);
  };
  if (!opt.span.empty() && static_cast<int>(opt.span.size()) != E)
    throw count_error(opt.span.size(), "spans", E, "equations");
  if (!opt.internal.empty() && static_cast<int>(opt.internal.size()) != V)
    throw count_error(opt.internal.size(), "internal flags", V, "values");
  if (!opt.group.empty() && static_cast<int>(opt.group.size()) != E)
    throw count_error(opt.group.size(), "groups", E, "equations");
  if (!opt.view.empty() && static_cast<int>(opt.view.size()) != E)
    throw count_error(opt.view.size(), "view flags", E, "equations");
  if (!opt.part.empty() && static_cast<int>(opt.part.size()) != E)
    throw count_error(opt.part.size(), "parts", E, "equations");
  if (!opt.static_elems.empty() && static_cast<int>(opt.static_elems.size()) != V)
    throw count_error(opt.static_elems.size(), "static_elems", V, "values");
  if (!opt.no_in_place.empty() && static_cast<int>(opt.no_in_place.size()) != E)
    throw count_error(opt.no_in_place.size(), "no_in_place flags", E, "equations");
  if (!opt.eqn_scratch.empty() && static_cast<int>(opt.eqn_scratch.size()) != E)
    throw count_error(opt.eqn_scratch.size(), "scratch lists", E, "equations");
  if (opt.align == 0 || (opt.align & (opt.align - 1)) != 0)
    throw Error("plan_memory: alignment " + std::to_string(opt.align) + " is not a power of two");
  // equations that run as one kernel: reads at the span's end, writes from its start
  auto span_first = [&](int d) { return opt.span.empty() ? d : opt.span[static_cast<size_t>(d)].first; };
  auto span_last = [&](int d) { return opt.span.empty() ? d : opt.span[static_cast<size_t>(d)].second; };
  for (int d = 0; d < static_cast<int>(opt.span.size()); ++d)
    if (span_first(d) > d || span_last(d) < d || span_last(d) >= E)
      throw Error("plan_memory: equation " + std::to_string(d) + " is outside its span [" +
                  std::to_string(span_first(d)) + ", " + std::to_string(span_last(d)) + "]");
  auto internal = [&](int id) { return !opt.internal.empty() && opt.internal[static_cast<size_t>(id)] != 0; };
  auto align_up = [&](size_t n) { return (n + opt.align - 1) / opt.align * opt.align; };
  Plan plan;
  plan.num_eqns = E;
  std::vector<ValuePlan>& v = plan.values;
  v.resize(static_cast<size_t>(V));
  for (int id = 0; id < V; ++id) {
    v[static_cast<size_t>(id)].bytes = p.type(id).bytes();
    v[static_cast<size_t>(id)].root = id;
  }

  // 1. homes
  using StaticKey = std::tuple<int, int, std::vector<int64_t>, std::vector<uint64_t>, int64_t>;
  auto static_key = [&](const Eqn& e) {
    std::vector<uint64_t> bits(e.attrs.literal.size());
    if (!bits.empty()) std::memcpy(bits.data(), e.attrs.literal.data(), bits.size() * sizeof(uint64_t));
    return StaticKey{static_cast<int>(e.op), static_cast<int>(p.type(e.out).dtype), p.type(e.out).shape,
                     std::move(bits), e.op == Op::iota ? e.attrs.axis : 0};
  };
  // The bytes each distinct constant / iota takes: the most its equal ones need.
  std::map<StaticKey, size_t> static_bytes;
  for (const Eqn& e : p.eqns) {
    if (op_kind(e.op) != OpKind::source) continue;
    const Type& t = p.type(e.out);
    const int64_t n = opt.static_elems.empty() ? 0 : opt.static_elems[static_cast<size_t>(e.out)];
    const size_t need = n > 0 && n < t.numel() ? static_cast<size_t>(n) * dtype_size(t.dtype) : t.bytes();
    size_t& b = static_bytes[static_key(e)];
    b = std::max(b, need);
  }
  std::map<StaticKey, size_t> statics_at;  // the offset of each distinct constant / iota
  plan.input_loc.resize(p.inputs.size());
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    ValuePlan& x = v[static_cast<size_t>(p.inputs[i].value)];
    x.home = Home::input;
    x.input = static_cast<int>(i);
    if (opt.caller_arrays) continue;  // the caller's Array: its address is set per run
    x.loc = {Space::inputs, plan.inputs_bytes};
    plan.input_loc[i] = x.loc;
    plan.inputs_bytes += align_up(x.bytes);
  }
  for (int d = 0; d < E; ++d) {
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    ValuePlan& x = v[static_cast<size_t>(e.out)];
    x.def = d;
    if (!opt.view.empty() && opt.view[static_cast<size_t>(d)] && e.op != Op::reshape) {
      const std::string what = "plan_memory: equation " + std::to_string(d) + " (" + op_name(e.op) + ")";
      if (e.op != Op::transpose && e.op != Op::convert && e.op != Op::broadcast_in_dim)
        throw Error(what + " cannot be a view");
      // An empty result reads nothing: a view of any operand (a scalar
      // broadcast to [0], adamw's scalars on an empty parameter).
      if (e.op != Op::convert && x.bytes != 0 && x.bytes != v[static_cast<size_t>(e.inputs[0])].bytes)
        throw Error(what + " cannot be a view: it makes " + p.type(e.out).str() + " of " + p.type(e.inputs[0]).str() +
                    ", another number of bytes");
      x.home = Home::view;
      x.root = v[static_cast<size_t>(e.inputs[0])].root;
      continue;
    }
    if (op_kind(e.op) == OpKind::source) {  // constant, iota
      // Equal ones (same op, type, literal bits, iota axis) share one copy:
      // statics are only read, and a model repeats its constants per layer.
      x.home = Home::statics;
      const StaticKey key = static_key(e);
      const auto [it, fresh] = statics_at.try_emplace(key, plan.statics_bytes);
      x.loc = {Space::statics, it->second};
      if (fresh) plan.statics_bytes += align_up(static_bytes.at(key));
    } else if (e.op == Op::reshape) {
      x.home = Home::view;
      x.root = v[static_cast<size_t>(e.inputs[0])].root;
    } else {
      x.home = Home::arena;  // every other op computes into a buffer of its own
    }
  }

  // 2. lifetimes, per root
  for (int d = 0; d < E; ++d)
    for (int x : p.eqns[static_cast<size_t>(d)].inputs) {
      ValuePlan& r = v[static_cast<size_t>(v[static_cast<size_t>(x)].root)];
      r.last = std::max(r.last, span_last(d));
    }
  for (const NamedValue& o : p.outputs) v[static_cast<size_t>(v[static_cast<size_t>(o.value)].root)].last = E;

  // 3. aliases (not with caller_arrays: the caller's Arrays take the outputs)
  plan.donated_input.assign(p.outputs.size(), -1);
  std::vector<char> written(p.inputs.size(), 0);
  struct Back { int output, input, root; };
  std::vector<Back> backs;
  const std::vector<Alias> none;
  for (const Alias& a : opt.caller_arrays ? none : p.aliases) {
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

  // 4. tiles: an internal value lives in its group's registers or tiles, and
  // gets no buffer below. With `group` (host), only one that nothing outside
  // its group reads, through any view, and that is no output.
  std::vector<char> escapes;
  auto group_of_value = [&](int r) {
    const int d = v[static_cast<size_t>(r)].def;
    return d < 0 ? -1 : opt.group[static_cast<size_t>(d)];
  };
  if (!opt.group.empty()) {
    escapes.assign(static_cast<size_t>(V), 0);
    for (int d = 0; d < E; ++d)
      for (int x : p.eqns[static_cast<size_t>(d)].inputs) {
        const int r = v[static_cast<size_t>(x)].root;
        const int g = group_of_value(r);
        if (g < 0 || g != opt.group[static_cast<size_t>(d)]) escapes[static_cast<size_t>(r)] = 1;
      }
    for (const NamedValue& o : p.outputs) escapes[static_cast<size_t>(v[static_cast<size_t>(o.value)].root)] = 1;
  }
  for (int id = 0; id < V; ++id) {
    ValuePlan& x = v[static_cast<size_t>(id)];
    if (x.home != Home::arena || !internal(id)) continue;
    if (!opt.group.empty() && (group_of_value(id) < 0 || escapes[static_cast<size_t>(id)])) continue;
    x.home = Home::tile;
  }

  // 4b. in place (host): an equation's result over an operand's buffer that it
  // reads for the last time; each root found through the merges made so far.
  if (opt.in_place) {
    std::vector<int> merged(static_cast<size_t>(V));
    for (int id = 0; id < V; ++id) merged[static_cast<size_t>(id)] = id;
    auto find = [&](int id) {
      while (merged[static_cast<size_t>(id)] != id) id = merged[static_cast<size_t>(id)];
      return id;
    };
    // In a host fused group (`group`), whose members run in order on each
    // tile's elements: whether every equation of d's span that reads root r
    // is d or one before it, each elementwise of equal widths or a sum or
    // maximum of r's tile (never a broadcast, which reads other elements), so
    // that each element of r is read before d writes the same element.
    auto read_before_in_group = [&](int d, int r) {
      for (int x = span_first(d); x <= span_last(d); ++x) {
        const Eqn& e = p.eqns[static_cast<size_t>(x)];
        bool reads = false;
        for (int in : e.inputs) reads |= find(v[static_cast<size_t>(in)].root) == r;
        if (!reads) continue;
        const bool tile_read = e.op == Op::reduce_sum || e.op == Op::reduce_max;
        if (x > d || !(tile_read || (is_elementwise(e.op) && in_place_ok(p, v, x, r)))) return false;
      }
      return true;
    };
    std::vector<char> output_root(static_cast<size_t>(V), 0);
    for (const NamedValue& o : p.outputs) output_root[static_cast<size_t>(v[static_cast<size_t>(o.value)].root)] = 1;
    for (int d = 0; d < E; ++d) {
      const Eqn& e = p.eqns[static_cast<size_t>(d)];
      ValuePlan& out = v[static_cast<size_t>(e.out)];
      // an equation run on its own, or in a host fused group whose members
      // read the operand before d writes over it; in another span of several
      // (a device kernel, two host GEMMs side by side) an equation may read
      // it after d writes
      const bool alone = span_first(d) == d && span_last(d) == d;
      // In a group: an elementwise result (written element by element, where
      // a reduction's accumulates across the tiles) that is no program output
      // (which the host computes in the caller's Array).
      const bool in_group = !opt.group.empty() && opt.group[static_cast<size_t>(d)] >= 0 && is_elementwise(e.op) &&
                            !output_root[static_cast<size_t>(e.out)];
      if (out.home != Home::arena || !(alone || in_group)) continue;
      // Alone: d's operands that its kernel may write over. In a group: any
      // buffer made before the group that its members up to d read (d's
      // result is made from them through values in tiles: softmax's
      // exponential over the logits).
      std::vector<int> candidates;
      if (alone) {
        for (int k = 0; k < static_cast<int>(e.inputs.size()); ++k)
          if (opt.in_place(d, k)) candidates.push_back(e.inputs[static_cast<size_t>(k)]);
      } else {
        for (int x = span_first(d); x <= d; ++x)
          for (int in : p.eqns[static_cast<size_t>(x)].inputs) candidates.push_back(in);
      }
      for (int c : candidates) {
        const int r = find(v[static_cast<size_t>(c)].root);
        ValuePlan& buf = v[static_cast<size_t>(r)];
        if (buf.home != Home::arena || buf.last != span_last(d) || buf.bytes != out.bytes) continue;
        // Alone and not elementwise (scatter_add_rows): the buffer is read
        // through that one operand only (its updates read after the copy).
        if (alone && !is_elementwise(e.op)) {
          int reads = 0;
          for (int x : e.inputs) reads += find(v[static_cast<size_t>(x)].root) == r ? 1 : 0;
          if (reads > 1) continue;
        }
        // In a group: of the result's dtype and element count, so that r is of
        // the writer's domain (a col group's members of K elements run after
        // its tiles, whatever their place in the group)
        const Type& rt = p.type(r);
        if (!alone && (buf.def >= span_first(d) || rt.dtype != p.type(e.out).dtype ||
                       rt.numel() != p.type(e.out).numel() || !read_before_in_group(d, r)))
          continue;
        merged[static_cast<size_t>(e.out)] = r;
        out.home = Home::view;
        buf.last = std::max(buf.last, out.last);
        out.last = -1;
        break;
      }
    }
    for (ValuePlan& x : v) x.root = find(x.root);
  }

  // 4c. outputs in the caller's Arrays (caller_arrays): the first output on
  // each arena buffer of its size
  plan.output_direct.assign(p.outputs.size(), 0);
  if (opt.caller_arrays)
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      const ValuePlan& out = v[static_cast<size_t>(p.outputs[o].value)];
      ValuePlan& r = v[static_cast<size_t>(out.root)];
      if (r.home != Home::arena || out.bytes == 0 || r.bytes != out.bytes) continue;
      r.home = Home::output;
      plan.output_direct[o] = 1;
    }

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
  for (int id = 0; id < V; ++id) {
    const ValuePlan& x = v[static_cast<size_t>(id)];
    if (x.home != Home::arena) continue;
    buffers.push_back({x.bytes, span_first(x.def), std::max(x.last, span_last(x.def))});
    buffer_value.push_back(id);
  }
  plan.scratch_loc.assign(static_cast<size_t>(E), {});
  std::vector<std::pair<int, size_t>> scratch_buffer;  // eqn, buffer index of its first entry
  for (int d = 0; d < static_cast<int>(opt.eqn_scratch.size()); ++d) {
    scratch_buffer.emplace_back(d, buffers.size());
    for (size_t bytes : opt.eqn_scratch[static_cast<size_t>(d)]) {
      buffers.push_back({bytes, span_first(d), span_last(d)});
      buffer_value.push_back(-1);
    }
  }
  const std::vector<size_t> offset = pack(buffers, opt.align, &plan.arena_bytes);
  for (size_t b = 0; b < buffers.size(); ++b)
    if (buffer_value[b] >= 0) v[static_cast<size_t>(buffer_value[b])].loc = {Space::arena, offset[b]};
  for (const auto& [d, b] : scratch_buffer)
    for (size_t k = 0; k < opt.eqn_scratch[static_cast<size_t>(d)].size(); ++k)
      plan.scratch_loc[static_cast<size_t>(d)].push_back({Space::arena, offset[b + k]});
  for (EndCopy& c : plan.end_copies) c.to = {Space::arena, offset[snapshot_of_input.at(c.input)]};

  // every location resolved: donated roots sit in their input's region, views
  // in their root's (with caller_arrays, a view's address is its root's slot)
  for (ValuePlan& x : v)
    if (x.home == Home::donated) x.loc = plan.input_loc[static_cast<size_t>(x.input)];
  for (ValuePlan& x : v)
    if (x.home == Home::view) {
      const ValuePlan& r = v[static_cast<size_t>(x.root)];
      if (!opt.caller_arrays) x.loc = r.loc;
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
  if (!opt.caller_arrays)
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
