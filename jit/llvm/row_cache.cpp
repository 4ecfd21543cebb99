#include "jit/llvm/row_cache.h"

#include <algorithm>
#include <iterator>

namespace kiln::jit::llvm_backend {
namespace {

bool costly(const KNode& n) {
  if (n.op != KOp::Unary || !is_floating(n.dtype)) return false;
  static constexpr OpId kCostly[] = {OpId::Exp,     OpId::Log,  OpId::Sin,  OpId::Cos, OpId::Tanh,
                                     OpId::Sigmoid, OpId::Gelu, OpId::Silu, OpId::Erf, OpId::Log1p};
  return std::find(std::begin(kCostly), std::end(kCostly), n.fn) != std::end(kCostly);
}

// Per pass, the nodes its element loop evaluates: Full-level ones below its roots, not
// through reductions (their values are the row's) nor, after their first pass, through
// the cached nodes (their values are loaded).
std::vector<std::vector<uint8_t>> pass_reach(const Kernel& k,
                                             const std::vector<std::vector<int>>& roots,
                                             const std::map<int, int>& cached) {
  std::vector<std::vector<uint8_t>> reach;
  for (const std::vector<int>& r : roots) {
    const int pass = static_cast<int>(reach.size());
    std::vector<uint8_t> seen(k.nodes.size(), 0);
    std::vector<int> stack(r);
    while (!stack.empty()) {
      const int i = stack.back();
      stack.pop_back();
      if (i < 0 || seen[i]) continue;
      const KNode& n = k.nodes[i];
      if (n.level != Level::Full || is_reduction(n.op)) continue;
      seen[i] = 1;
      if (auto c = cached.find(i); c != cached.end() && c->second < pass) continue;
      for (int32_t a : n.in) stack.push_back(a);
    }
    reach.push_back(std::move(seen));
  }
  return reach;
}

}  // namespace

std::vector<std::vector<int>> row_pass_roots(const Kernel& k) {
  std::vector<std::vector<int>> roots;
  for (int s = 1; s <= k.stages(); ++s) {
    std::vector<int> r;
    for (const KNode& n : k.nodes)
      if (is_reduction(n.op) && n.stage == s) r.push_back(n.in[0]);
    if (!r.empty()) roots.push_back(std::move(r));
  }
  std::vector<int> stored;
  for (const KStore& st : k.stores)
    if (!k.operands[st.operand].row_level) stored.push_back(st.node);
  roots.push_back(std::move(stored));
  return roots;
}

std::map<int, int> choose_row_cache(const Kernel& k, const std::vector<std::vector<int>>& roots) {
  std::map<int, int> chosen;
  // Latest nodes first: a cached node hides the ones below it from the later passes.
  for (int i = static_cast<int>(k.nodes.size()) - 1; i >= 0; --i) {
    if (!costly(k.nodes[i]) || chosen.size() >= kMostRowCached) continue;
    const std::vector<std::vector<uint8_t>> reach = pass_reach(k, roots, chosen);
    int first = -1;
    bool later = false;
    for (size_t p = 0; p < reach.size(); ++p) {
      if (!reach[p][i]) continue;
      if (first < 0)
        first = static_cast<int>(p);
      else
        later = true;
    }
    if (later) chosen[i] = first;
  }
  return chosen;
}

}  // namespace kiln::jit::llvm_backend
