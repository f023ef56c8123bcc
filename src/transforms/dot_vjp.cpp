// dot_general's cotangents are themselves dot_generals: contract g with the
// other operand over the dimensions that operand contributed freely, batch over
// the batch dimensions, then transpose into the operand's layout. Of the two
// operand orders we pick one whose result already has that layout when there is
// one (plain matmuls, q k^T), so most VJPs need no transpose at all.
#include "transforms/dot_vjp.h"

#include <algorithm>
#include <utility>

namespace capstep::autodiff_detail {
namespace {

using Pairs = std::vector<std::pair<int64_t, int64_t>>;

// An operand of the VJP contraction; label[axis] is the axis of the target
// (the differentiated operand) that this axis becomes, or -1 if contracted.
struct Side {
  Tensor t;
  std::vector<int64_t> label;
};

// Result labels of dot_general(x, y) (batch, x free, y free).
std::vector<int64_t> result_labels(const Side& x, const Side& y, const Pairs& batch, const Pairs& contract) {
  std::vector<int64_t> xb, xc, yb, yc;
  for (auto [a, b] : batch) { xb.push_back(a); yb.push_back(b); }
  for (auto [a, b] : contract) { xc.push_back(a); yc.push_back(b); }
  std::vector<int64_t> labels;
  for (int64_t a : xb) labels.push_back(x.label[static_cast<size_t>(a)]);
  for (int64_t a : dot_free_axes(x.t.rank(), xb, xc)) labels.push_back(x.label[static_cast<size_t>(a)]);
  for (int64_t a : dot_free_axes(y.t.rank(), yb, yc)) labels.push_back(y.label[static_cast<size_t>(a)]);
  return labels;
}

bool is_identity(const std::vector<int64_t>& labels) {
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] != static_cast<int64_t>(i)) return false;
  return true;
}

Pairs swapped(const Pairs& p) {
  Pairs out;
  for (auto [a, b] : p) out.emplace_back(b, a);
  return out;
}

Tensor emit_dot(const Side& x, const Side& y, const Pairs& batch, const Pairs& contract) {
  DotDims d;
  for (auto [a, b] : batch) { d.lhs_batch.push_back(a); d.rhs_batch.push_back(b); }
  for (auto [a, b] : contract) { d.lhs_contract.push_back(a); d.rhs_contract.push_back(b); }
  return dot_general(x.t, y.t, d);
}

// dot_general of x and y laid out in target order (a transpose only if neither
// operand order gives that layout directly).
Tensor contract_into(const Side& x, const Side& y, const Pairs& batch, const Pairs& contract) {
  std::vector<int64_t> labels = result_labels(x, y, batch, contract);
  if (is_identity(labels)) return emit_dot(x, y, batch, contract);
  std::vector<int64_t> labels_yx = result_labels(y, x, swapped(batch), swapped(contract));
  if (is_identity(labels_yx)) return emit_dot(y, x, swapped(batch), swapped(contract));
  Tensor r = emit_dot(x, y, batch, contract);
  // transpose: out[i] = in[perm[i]] where in axis perm[i] carries target axis i
  std::vector<int64_t> perm(labels.size());
  for (size_t j = 0; j < labels.size(); ++j) perm[static_cast<size_t>(labels[j])] = static_cast<int64_t>(j);
  return transpose(r, perm);
}

}  // namespace

Tensor dot_general_vjp_lhs(const Tensor& g, const Tensor& rhs, const Type& lhs_type, const DotDims& d) {
  const int rl = lhs_type.rank(), rr = rhs.rank();
  const size_t nb = d.lhs_batch.size();
  const std::vector<int64_t> lfree = dot_free_axes(rl, d.lhs_batch, d.lhs_contract);
  const std::vector<int64_t> rfree = dot_free_axes(rr, d.rhs_batch, d.rhs_contract);
  // g axes: [batch][lhs free][rhs free]
  Side gs{g, std::vector<int64_t>(static_cast<size_t>(g.rank()), -1)};
  Side rs{rhs, std::vector<int64_t>(static_cast<size_t>(rr), -1)};
  Pairs batch, contract;
  for (size_t k = 0; k < nb; ++k) {
    gs.label[k] = d.lhs_batch[k];
    rs.label[static_cast<size_t>(d.rhs_batch[k])] = d.lhs_batch[k];
    batch.emplace_back(static_cast<int64_t>(k), d.rhs_batch[k]);
  }
  for (size_t j = 0; j < lfree.size(); ++j) gs.label[nb + j] = lfree[j];
  for (size_t j = 0; j < rfree.size(); ++j)
    contract.emplace_back(static_cast<int64_t>(nb + lfree.size() + j), rfree[j]);
  for (size_t c = 0; c < d.rhs_contract.size(); ++c)
    rs.label[static_cast<size_t>(d.rhs_contract[c])] = d.lhs_contract[c];
  return contract_into(gs, rs, batch, contract);
}

Tensor dot_general_vjp_rhs(const Tensor& g, const Tensor& lhs, const Type& rhs_type, const DotDims& d) {
  const int rl = lhs.rank(), rr = rhs_type.rank();
  const size_t nb = d.lhs_batch.size();
  const std::vector<int64_t> lfree = dot_free_axes(rl, d.lhs_batch, d.lhs_contract);
  const std::vector<int64_t> rfree = dot_free_axes(rr, d.rhs_batch, d.rhs_contract);
  Side ls{lhs, std::vector<int64_t>(static_cast<size_t>(rl), -1)};
  Side gs{g, std::vector<int64_t>(static_cast<size_t>(g.rank()), -1)};
  Pairs batch, contract;
  for (size_t k = 0; k < nb; ++k) {
    ls.label[static_cast<size_t>(d.lhs_batch[k])] = d.rhs_batch[k];
    gs.label[k] = d.rhs_batch[k];
    batch.emplace_back(d.lhs_batch[k], static_cast<int64_t>(k));
  }
  for (size_t j = 0; j < lfree.size(); ++j) contract.emplace_back(lfree[j], static_cast<int64_t>(nb + j));
  for (size_t j = 0; j < rfree.size(); ++j) gs.label[nb + lfree.size() + j] = rfree[j];
  for (size_t c = 0; c < d.lhs_contract.size(); ++c)
    ls.label[static_cast<size_t>(d.lhs_contract[c])] = d.rhs_contract[c];
  return contract_into(ls, gs, batch, contract);
}

}  // namespace capstep::autodiff_detail
