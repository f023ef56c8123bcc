// dead_code_eliminate: the equations no output needs dropped, values renumbered.
#include "capstep/transforms.h"

namespace capstep {

Program dead_code_eliminate(const Program& p) {
  std::vector<char> live(static_cast<size_t>(p.num_values()), 0);
  for (const NamedValue& o : p.outputs) live[static_cast<size_t>(o.value)] = 1;
  for (size_t k = p.eqns.size(); k-- > 0;) {
    const Eqn& e = p.eqns[k];
    if (!live[static_cast<size_t>(e.out)]) continue;
    for (int v : e.inputs) live[static_cast<size_t>(v)] = 1;
  }
  Program q;
  q.name = p.name;
  std::vector<int> remap(static_cast<size_t>(p.num_values()), -1);
  for (const NamedValue& in : p.inputs) remap[static_cast<size_t>(in.value)] = q.add_input(in.name, p.type(in.value));
  for (const Eqn& e : p.eqns) {
    if (!live[static_cast<size_t>(e.out)]) continue;
    Eqn ne{e.op, {}, q.num_values(), e.attrs};
    for (int v : e.inputs) ne.inputs.push_back(remap[static_cast<size_t>(v)]);
    q.types.push_back(p.type(e.out));
    remap[static_cast<size_t>(e.out)] = ne.out;
    q.eqns.push_back(std::move(ne));
  }
  for (const NamedValue& o : p.outputs) q.outputs.push_back({o.name, remap[static_cast<size_t>(o.value)]});
  q.aliases = p.aliases;
  return q;
}

}  // namespace capstep
