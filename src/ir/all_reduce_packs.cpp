// all_reduce_packs: see all_reduce_packs.h.
#include "ir/all_reduce_packs.h"

#include <algorithm>

namespace capstep {

std::vector<int> all_reduce_packs(const Program& p) {
  const int ne = static_cast<int>(p.eqns.size());
  std::vector<int> pack(static_cast<size_t>(ne), -1);
  int next = 0;
  for (int i = 0; i < ne;) {
    const Eqn& e = p.eqns[static_cast<size_t>(i)];
    if (e.op != Op::all_reduce) {
      ++i;
      continue;
    }
    const DType dt = p.type(e.out).dtype;
    std::vector<int> outs;
    int j = i;
    for (; j < ne; ++j) {
      const Eqn& m = p.eqns[static_cast<size_t>(j)];
      if (m.op != Op::all_reduce || p.type(m.out).dtype != dt) break;
      if (std::find(outs.begin(), outs.end(), m.inputs[0]) != outs.end()) break;
      outs.push_back(m.out);
    }
    if (j - i >= 2) {
      for (int k = i; k < j; ++k) pack[static_cast<size_t>(k)] = next;
      ++next;
    }
    i = j;
  }
  return pack;
}

}  // namespace capstep
