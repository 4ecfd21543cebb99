#include "ops/autograd/engine.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "ops/api.h"
#include "ops/autograd/grad_mode.h"
#include "ops/autograd/hooks.h"
#include "runtime/pointer_hash.h"
#include "ops/autograd/node.h"
#include "ops/autograd/record.h"
#include "runtime/error.h"

namespace kiln::autograd {
namespace {

struct Later {
  bool operator()(const Node* a, const Node* b) const { return a->sequence < b->sequence; }
};

// Where grad() captures a gradient instead of accumulating it: (node, slot) -> result.
using Captures = std::map<std::pair<const Node*, int>, size_t>;

// The nodes a backward pass reaches, each with its count of dependencies: open
// addressing in one flat array (a node-based hash set and map cost a malloc and a free
// per node and per pass; a training step's backward reaches hundreds).
class DependencyCounts {
 public:
  // n's count, 0 if n was not seen yet; *fresh: whether it was not.
  int& at(const Node* n, bool* fresh = nullptr) {
    size_t i = slot(n);
    const bool absent = slots_[i].key == nullptr;
    if (fresh) *fresh = absent;
    if (absent) {
      if (2 * (size_ + 1) > slots_.size()) {
        grow();
        i = slot(n);
      }
      slots_[i].key = n;
      ++size_;
    }
    return slots_[i].count;
  }

 private:
  struct Slot {
    const Node* key = nullptr;
    int count = 0;
  };
  size_t slot(const Node* n) const {
    const size_t mask = slots_.size() - 1;
    size_t i = pointer_hash_slot(n, mask);
    while (slots_[i].key != nullptr && slots_[i].key != n) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old)
      if (s.key) slots_[slot(s.key)] = s;
  }
  std::vector<Slot> slots_ = std::vector<Slot>(256);  // a power of two, at most half full
  size_t size_ = 0;
};

void check_root(const Tensor& root, size_t i) {
  KILN_CHECK(root.defined(), ValueError, "[backward] root ", i, " is undefined");
  KILN_CHECK(requires_grad(root), Error, "[backward] element ", i,
             " of the tensors does not require grad and has no grad_fn (was it computed "
             "under no_grad, or from tensors that do not require grad?)");
}

Tensor seed_grad(const Tensor& root, const std::vector<Tensor>& grads, size_t i) {
  if (i < grads.size() && grads[i].defined()) {
    const Tensor& g = grads[i];
    KILN_CHECK(g.sizes() == root.sizes(), ShapeError, "[backward] grad ", i, " has shape ",
               dims_str(g.sizes()), " but its root has shape ", dims_str(root.sizes()));
    return g.dtype() == root.dtype() && g.device() == root.device()
               ? g
               : g.to(root.device()).to(root.dtype());
  }
  KILN_CHECK(root.numel() == 1, Error, "[backward] grad can be implied only for a tensor with ",
             "one element; root ", i, " has shape ", dims_str(root.sizes()),
             " (pass a gradient of that shape)");
  return ones(root.sizes(), TensorOptions(root.dtype(), root.device()));
}

// A node's gradient for input i, checked against the input and converted to its dtype.
Tensor conform(const Node& node, size_t i, Tensor g) {
  const ValueInfo& info = node.inputs[i];
  KILN_CHECK(g.sizes() == info.sizes, Error, "[backward] ", node.name(),
             " produced a gradient of shape ", dims_str(g.sizes()), " for input ", i, " of shape ",
             dims_str(info.sizes), " (kiln bug)");
  if (g.device() != info.device) g = g.to(info.device);
  if (g.dtype() != info.dtype) g = g.to(info.dtype);
  return g;
}

// A slice's gradient written straight into its place in the input's gradient buffer:
// the buffer is made here once, uninitialized (so no one else holds it), the first slice
// into a part is copied, a later one into a part already written is added, and the parts
// no slice wrote are zeroed before anything reads the buffer (zero_unwritten). A fused
// projection split three ways (q, k, v) then costs three slice writes, not three
// zero-filled full-size tensors and two full-size adds. The rule runs instead where the
// buffer already holds a gradient kiln did not make (it may be held elsewhere) or the
// gradient's dtype or device differs from the input's.
struct OwnedBuffer {
  std::vector<std::pair<int64_t, int64_t>> written;  // [start, end) along `dim`, step 1
  int64_t dim = -1;
  bool summed = false;       // another gradient was added in: every later slice adds
  bool initialized = false;  // every element holds a gradient or zero
};
// Zeroes what no slice wrote, once; afterwards the buffer can be read and added to.
void zero_unwritten(Tensor& dst, OwnedBuffer& owned) {
  if (owned.initialized) return;
  owned.initialized = true;
  if (owned.dim < 0) {
    dst.zero_();
    return;
  }
  std::vector<std::pair<int64_t, int64_t>> w = owned.written;
  std::sort(w.begin(), w.end());
  int64_t at = 0;
  for (const auto& [lo, hi] : w) {
    if (lo > at) dst.slice(owned.dim, at, lo).zero_();
    at = std::max(at, hi);
  }
  if (at < dst.size(owned.dim)) dst.slice(owned.dim, at, dst.size(owned.dim)).zero_();
}
// The slice op of node n, if its gradient g can go straight into a buffer.
const OpAttrs* slice_of(const Node& n, const Tensor& g) {
  const auto* op = dynamic_cast<const OpNode*>(&n);
  if (!op || op->call().op != OpId::Slice || n.inputs.size() != 1 || !g.defined()) return nullptr;
  const ValueInfo& info = n.inputs[0];
  if (g.dtype() != info.dtype || g.device() != info.device) return nullptr;
  return &op->call().attrs;
}
void slice_into_buffer(const ValueInfo& info, const OpAttrs& a, const Tensor& g, Tensor& dst,
                       OwnedBuffer& owned) {
  if (!dst.defined()) {
    dst = empty(info.sizes, TensorOptions(info.dtype, info.device));
    owned = OwnedBuffer{};
  }
  Tensor part = dst.slice(a.dim, a.start, a.end, a.step);
  // The part's first index along its dim as slice() resolved it (a negative start counts
  // from the end): the part starts at dst's offset plus lo strides.
  const int64_t dim = a.dim < 0 ? a.dim + dst.dim() : a.dim;
  const int64_t lo = dst.stride(dim) == 0 || part.numel() == 0
                         ? 0
                         : (part.storage_offset() - dst.storage_offset()) / dst.stride(dim);
  const int64_t hi = lo + part.size(dim);
  bool fresh =
      !owned.summed && a.step == 1 && part.numel() > 0 && (owned.dim < 0 || owned.dim == dim);
  for (const auto& [wlo, whi] : owned.written)
    if (fresh && lo < whi && wlo < hi) fresh = false;
  if (fresh) {
    part.copy_(g);
    owned.dim = dim;
    owned.written.emplace_back(lo, hi);
  } else {
    zero_unwritten(dst, owned);
    part.add_(g);
    owned.summed = true;  // written where `written` does not say: later slices add too
  }
}

void run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
         const Captures* captures, std::vector<Tensor>* captured) {
  NoGradScope no_grad;
  LibraryLoopScope in_backward;
  // Seed the root edges.
  std::unordered_map<Node*, TensorList> buffers;
  // Gradient buffers made by slice_into_buffer (only kiln holds them), by (node, slot).
  std::map<std::pair<const Node*, int>, OwnedBuffer> owned;
  std::vector<std::shared_ptr<Node>> keep;  // the graph stays alive while it runs
  std::vector<Edge> root_edges;
  for (size_t i = 0; i < roots.size(); ++i) {
    check_root(roots[i], i);
    Edge e = edge_of(roots[i]);
    TensorList& buf = buffers[e.fn.get()];
    buf.resize(static_cast<size_t>(e.fn->num_outputs()));
    Tensor g = seed_grad(roots[i], grads, i);
    buf[e.slot] = buf[e.slot].defined() ? add(buf[e.slot], g) : g;
    root_edges.push_back(std::move(e));
  }
  // Count the dependencies of every reachable node (deps holds exactly the reachable).
  DependencyCounts deps;
  std::vector<Node*> stack;
  for (const Edge& e : root_edges) {
    bool fresh = false;
    deps.at(e.fn.get(), &fresh);
    if (fresh) {
      stack.push_back(e.fn.get());
      keep.push_back(e.fn);
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.fn) continue;
      bool fresh = false;
      ++deps.at(e.fn.get(), &fresh);
      if (fresh) {
        stack.push_back(e.fn.get());
        keep.push_back(e.fn);
      }
    }
  }
  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  std::unordered_set<Node*> queued;
  for (const Edge& e : root_edges)
    if (deps.at(e.fn.get()) == 0 && queued.insert(e.fn.get()).second) ready.push(e.fn.get());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    TensorList in = std::move(buffers[n]);
    buffers.erase(n);
    in.resize(static_cast<size_t>(n->num_outputs()));
    for (size_t s = 0; s < in.size(); ++s) {
      auto o = owned.find({n, static_cast<int>(s)});
      if (o != owned.end() && in[s].defined()) zero_unwritten(in[s], o->second);
    }
    // grad() captures a gradient before the hooks of its tensor run (PyTorch's order).
    if (captures) {
      for (size_t s = 0; s < in.size(); ++s) {
        auto it = captures->find({n, static_cast<int>(s)});
        if (it == captures->end() || !in[s].defined()) continue;
        Tensor& slot = (*captured)[it->second];
        slot = slot.defined() ? add(slot, in[s]) : in[s];
      }
    }
    // grad() returns gradients and leaves the leaves' grad() alone.
    const bool sink = captures && dynamic_cast<AccumulateGrad*>(n) != nullptr;
    for (size_t s = 0; s < in.size(); ++s) {
      if (!in[s].defined()) continue;
      if (!sink) in[s] = run_hooks(*n, static_cast<int>(s), std::move(in[s]));
      if (s < n->retained.size()) {
        if (auto impl = n->retained[s].lock(); impl && impl->autograd) {
          Tensor& kept = impl->autograd->grad;
          kept = kept.defined() ? add(kept, in[s]) : in[s].clone();
        }
      }
    }
    if (!sink && n->next.size() == 1 && n->next[0].fn && !in.empty()) {
      const Edge& e = n->next[0];
      TensorList& buf = buffers[e.fn.get()];
      buf.resize(static_cast<size_t>(e.fn->num_outputs()));
      Tensor& dst = buf[static_cast<size_t>(e.slot)];
      const std::pair<const Node*, int> key{e.fn.get(), e.slot};
      const OpAttrs* slice = slice_of(*n, in[0]);
      if (slice && (!dst.defined() || owned.count(key))) {
        slice_into_buffer(n->inputs[0], *slice, in[0], dst, owned[key]);
        if (!retain_graph) n->release();
        if (--deps.at(e.fn.get()) == 0) ready.push(e.fn.get());
        continue;
      }
    }
    TensorList out = sink ? TensorList(n->next.size()) : n->apply(in);
    if (!retain_graph) n->release();
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      if (!e.fn) continue;
      if (i < out.size() && out[i].defined()) {
        Tensor g = conform(*n, i, std::move(out[i]));
        TensorList& buf = buffers[e.fn.get()];
        buf.resize(static_cast<size_t>(e.fn->num_outputs()));
        Tensor& dst = buf[static_cast<size_t>(e.slot)];
        // A sum is a new tensor; a gradient passed on as is may be held elsewhere.
        if (dst.defined()) {
          auto o = owned.find({e.fn.get(), e.slot});
          if (o != owned.end()) zero_unwritten(dst, o->second);
          dst = add(dst, g);
          if (o != owned.end()) o->second.summed = true;
        } else {
          dst = std::move(g);
          owned.erase({e.fn.get(), e.slot});
        }
      }
      if (--deps.at(e.fn.get()) == 0) ready.push(e.fn.get());
    }
  }
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  run(roots, grads, retain_graph, nullptr, nullptr);
}

namespace {
constinit thread_local int tls_grad_calls = 0;
}  // namespace

bool in_grad_call() { return tls_grad_calls > 0; }

std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grads, bool retain_graph, bool allow_unused) {
  struct GradCall {
    GradCall() { ++tls_grad_calls; }
    ~GradCall() { --tls_grad_calls; }
  } in_grad;
  Captures captures;
  std::vector<std::shared_ptr<Node>> keep;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(requires_grad(inputs[i]), Error, "[grad] input ", i,
               " does not require grad, so it has no gradient");
    Edge e = edge_of(inputs[i]);
    captures[{e.fn.get(), e.slot}] = i;
    keep.push_back(std::move(e.fn));
  }
  std::vector<Tensor> out(inputs.size());
  run(roots, grads, retain_graph, &captures, &out);
  for (size_t i = 0; i < out.size(); ++i) {
    KILN_CHECK(out[i].defined() || allow_unused, Error, "[grad] input ", i,
               " is not used by the roots' graph (pass allow_unused=true to get an undefined "
               "gradient for it)");
  }
  return out;
}

}  // namespace kiln::autograd
