// all_reduce on the host: one step per all_reduce, and packs of them sent as
// one message (optim::data_parallel's packed form): gathered together in the
// fused order (gather_packs) and made one step (Impl::pack_all_reduces).
#include <algorithm>
#include <cstring>

#include "backend/host/interpreter_impl.h"

namespace capstep::host {
namespace {

void all_reduce_pack_step(const Step& s, void* const* slots) {
  AllReducePack& p = *static_cast<AllReducePack*>(s.group);
  Communicator* c = *p.comm;
  if (c == nullptr || c->size() <= 1) {  // one replica: each result is its operand
    for (const AllReducePack::Member& m : p.members)
      if (slots[m.out] != slots[m.in] && m.n > 0)
        std::memmove(slots[m.out], slots[m.in], static_cast<size_t>(m.n) * p.elem_bytes);
    return;
  }
  int64_t total = 0;
  for (const AllReducePack::Member& m : p.members) total += m.n;
  if (p.buffer.size() < static_cast<size_t>(total) * p.elem_bytes) p.buffer.resize(static_cast<size_t>(total) * p.elem_bytes);
  size_t at = 0;
  for (const AllReducePack::Member& m : p.members) {
    const size_t b = static_cast<size_t>(m.n) * p.elem_bytes;
    if (b) std::memcpy(p.buffer.data() + at, slots[m.in], b);
    at += b;
  }
  if (total > 0) c->all_reduce_sum(p.buffer.data(), p.dtype, total);
  at = 0;
  for (const AllReducePack::Member& m : p.members) {
    const size_t b = static_cast<size_t>(m.n) * p.elem_bytes;
    if (b) std::memcpy(slots[m.out], p.buffer.data() + at, b);
    at += b;
  }
}

}  // namespace

// all_reduce: the operand's bytes (unless it was computed in place), then the
// sum over the replicas when there are several.
void all_reduce_step(const Step& s, void* const* slots) {
  void* out = slots[s.out];
  const void* in = slots[s.in[0]];
  if (out != in && s.n > 0) std::memcpy(out, in, static_cast<size_t>(s.n) * s.elem_bytes);
  Communicator* c = *s.comm;
  if (c != nullptr && c->size() > 1 && s.n > 0) c->all_reduce_sum(out, s.program->type(s.out).dtype, s.n);
}

// Host fusion orders its groups by level, which scatters a pack's all_reduce
// equations over the step (each right after its operand's producer). Moves
// each pack's members together, to just after the last of them is ready: the
// groups between the first member and the last that read a member's result
// (directly or not) move after the pack, in their order; the others stay.
// Every group still comes after the groups it reads. A pack whose member would
// read a moved group is left as it is (then it is sent as several messages).
void gather_packs(plan::Fused& f, const std::vector<int>& pack_of_old) {
  const int G = static_cast<int>(f.groups.size());
  int packs = 0;
  for (int k : pack_of_old) packs = std::max(packs, k + 1);
  if (packs == 0) return;
  std::vector<int> order(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) order[static_cast<size_t>(g)] = g;
  std::vector<int> def_group(static_cast<size_t>(f.program.num_values()), -1);
  for (size_t e = 0; e < f.program.eqns.size(); ++e) def_group[static_cast<size_t>(f.program.eqns[e].out)] = f.group_of[e];
  auto group_pack = [&](int g) {
    const plan::Group& gr = f.groups[static_cast<size_t>(g)];
    return gr.size() == 1 ? pack_of_old[static_cast<size_t>(f.old_index[static_cast<size_t>(gr.first)])] : -1;
  };
  for (int k = 0; k < packs; ++k) {
    int first = -1, last = -1;
    for (int i = 0; i < G; ++i)
      if (group_pack(order[static_cast<size_t>(i)]) == k) {
        if (first < 0) first = i;
        last = i;
      }
    if (first < 0) continue;
    std::vector<char> moved(static_cast<size_t>(G), 0);  // members and what reads them
    bool ok = true;
    for (int i = first; i <= last && ok; ++i) {
      const int g = order[static_cast<size_t>(i)];
      const plan::Group& gr = f.groups[static_cast<size_t>(g)];
      bool reads_moved = false;
      for (int e = gr.first; e <= gr.last; ++e)
        for (int v : f.program.eqns[static_cast<size_t>(e)].inputs) {
          const int d = def_group[static_cast<size_t>(v)];
          if (d >= 0 && d != g && moved[static_cast<size_t>(d)]) reads_moved = true;
        }
      if (group_pack(g) == k) {
        if (reads_moved) ok = false;  // a member reading another's result: leave this pack alone
        moved[static_cast<size_t>(g)] = 1;
      } else if (reads_moved) {
        moved[static_cast<size_t>(g)] = 2;
      }
    }
    if (!ok) continue;
    std::vector<int> next;
    for (int i = 0; i < G; ++i) {
      const int g = order[static_cast<size_t>(i)];
      if (i < first || i > last || !moved[static_cast<size_t>(g)]) next.push_back(g);
      if (i == last) {
        for (int j = first; j <= last; ++j)
          if (moved[static_cast<size_t>(order[static_cast<size_t>(j)])] == 1) next.push_back(order[static_cast<size_t>(j)]);
        for (int j = first; j <= last; ++j)
          if (moved[static_cast<size_t>(order[static_cast<size_t>(j)])] == 2) next.push_back(order[static_cast<size_t>(j)]);
      }
    }
    order = std::move(next);
  }
  // Renumber: each group's equations in the new group order.
  plan::Fused r = f;
  r.program.eqns.clear();
  r.old_index.clear();
  r.view.clear();
  r.group_of.clear();
  std::vector<int> new_group(static_cast<size_t>(G));
  for (int i = 0; i < G; ++i) new_group[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
  for (int i = 0; i < G; ++i) {
    plan::Group g = f.groups[static_cast<size_t>(order[static_cast<size_t>(i)])];
    const int at = static_cast<int>(r.program.eqns.size());
    for (int e = g.first; e <= g.last; ++e) {
      r.program.eqns.push_back(f.program.eqns[static_cast<size_t>(e)]);
      r.old_index.push_back(f.old_index[static_cast<size_t>(e)]);
      r.view.push_back(f.view[static_cast<size_t>(e)]);
      r.group_of.push_back(i);
    }
    g.last = at + g.size() - 1;
    g.first = at;
    r.groups[static_cast<size_t>(i)] = g;
  }
  for (std::vector<int>& w : r.waves)
    for (int& g : w) g = new_group[static_cast<size_t>(g)];
  f = std::move(r);
}

// Packs (all_reduce_packs): the members, consecutive here (fused:
// gather_packs), become one step, one message; step_at follows the steps to
// their new places.
void Interpreter::Impl::pack_all_reduces(Build& b) {
  const std::vector<int>& pack_of = b.pack_of;
  std::vector<int>& step_at = b.step_at;
  std::vector<Step> packed;
  std::vector<int> packed_at(steps.size(), -1);  // old step index -> new
  for (size_t i = 0; i < steps.size();) {
    packed_at[i] = static_cast<int>(packed.size());
    if (steps[i].fn != &all_reduce_step) {
      packed.push_back(steps[i++]);
      continue;
    }
    const int k = pack_of[static_cast<size_t>(steps[i].eqn)];
    size_t j = i + 1;
    while (k >= 0 && j < steps.size() && steps[j].fn == &all_reduce_step && pack_of[static_cast<size_t>(steps[j].eqn)] == k) ++j;
    if (j - i == 1) {
      packed.push_back(steps[i++]);
      continue;
    }
    auto pack = std::make_unique<AllReducePack>();
    pack->dtype = prog.type(steps[i].out).dtype;
    pack->elem_bytes = dtype_size(pack->dtype);
    pack->comm = &comm;
    for (size_t k = i; k < j; ++k) {
      pack->members.push_back({steps[k].in[0], steps[k].out, steps[k].n});
      packed_at[k] = static_cast<int>(packed.size());
    }
    Step s = steps[i];
    s.fn = &all_reduce_pack_step;
    s.group = pack.get();
    packs.push_back(std::move(pack));
    packed.push_back(s);
    i = j;
  }
  steps = std::move(packed);
  for (int& a : step_at)
    if (a >= 0) a = packed_at[static_cast<size_t>(a)];
}

}  // namespace capstep::host
