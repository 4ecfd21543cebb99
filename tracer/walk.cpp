#include "tracer/walk.h"

#include <algorithm>

#include "runtime/block_cache.h"
#include "runtime/error.h"
#include "tracer/symbolic_shapes.h"

namespace kiln::tracer {
namespace {

struct LazyToken final : PendingValue {};

// Walk::seen_held's period and distance: every this many ops, the values made at least
// this many ops ago that are still held.
constexpr size_t kHeldLongOps = 64;

bool same_scalar(const Scalar& a, const Scalar& b) {
  return a.kind() == b.kind() && a.to_double() == b.to_double() && a.to_int() == b.to_int();
}

// Whether the first `count` of `a` are the call's scalars (and there are no others).
bool same_scalars(const Scalar* a, size_t count, const OpCall& call) {
  if (count != call.scalars.size()) return false;
  for (size_t k = 0; k < count; ++k)
    if (!same_scalar(a[k], call.scalars[k])) return false;
  return true;
}

}  // namespace

WalkMode walk_mode_for(const Anchor& anchor, uint64_t now) {
  switch (anchor.lifecycle.state()) {
    case TraceState::Recording:
      return anchor.fresh_paths.suspended(now) ? WalkMode::Eager : WalkMode::Record;
    case TraceState::Compiled:
      return WalkMode::Replay;
    case TraceState::SingleOp:
      return WalkMode::EagerSingle;
    case TraceState::Blacklisted:
    case TraceState::SlowerThanEager:
    case TraceState::CompileFailed:
      return WalkMode::Eager;
  }
  return WalkMode::Record;
}

void Walk::begin(Anchor& start, uint64_t now) {
  anchor = &start;
  tick = now;
  node = &start.root;
  node->last_use = now;
  mode = walk_mode_for(start, now);
}

void Walk::clear() {
  mode = WalkMode::Idle;
  node = nullptr;
  anchor = nullptr;
  tick = 0;
  externals.clear();
  scalars.clear();
  outputs.clear();
  exact.clear();
  seen_held.clear();
  values.clear();
  external_of.clear();
  external_on.clear();
  written.clear();
  pending_token.reset();
  eager_ns = 0;
  exit_cause.reset();
  symbol_values.clear();
  index_values.clear();
  metas.clear();
  heads.clear();
  run_site = 0;
  run_start = 0;
  partial.reset();
  partial_node = nullptr;
  partial_next = SIZE_MAX;
  partial_probe = 1;
  lazy::tls_pending = false;
}

bool Walk::match(const TraceOp& edge, const OpCall& call, const Tensor* target,
                 std::vector<Tensor>* new_externals) const {
  if (edge.op != call.op || edge.inputs.size() != call.inputs.size() ||
      edge.in_place != (target != nullptr) || edge.scalar_kinds.size() != call.scalars.size())
    return false;
  for (size_t i = 0; i < call.scalars.size(); ++i)
    if (edge.scalar_kinds[i] != call.scalars[i].kind()) return false;
  if (!edge.bounds.any() && !(edge.attrs == call.attrs)) return false;
  size_t guard = 0;
  const int32_t base = static_cast<int32_t>(externals.size());
  std::vector<int16_t> bound;  // symbols this call bound: unbound again if it fails
  auto check = [&](const Tensor& t, const InputRef& ref) {
    const TensorImpl* key = t.impl();
    const int value = values.find(key);
    if (value >= 0) return ref.kind == InputRef::Kind::Value && ref.index == value;
    if (ref.kind != InputRef::Kind::External) return false;
    const int slot = external_of.find(key);
    if (slot >= 0) return ref.index == slot;
    for (size_t j = 0; j < new_externals->size(); ++j)
      if ((*new_externals)[j].impl() == key) return ref.index == base + static_cast<int32_t>(j);
    if (ref.index != base + static_cast<int32_t>(new_externals->size()) ||
        guard >= edge.new_guards.size())
      return false;
    const TensorGuard& g = edge.new_guards[guard++];
    if (g.dtype != t.dtype() || g.device != t.device() || key->storage == nullptr) return false;
    if (g.symbolic() ? !match_symbolic_sizes(g, t, symbol_values, bound)
                     : g.sizes != t.sizes() || g.strides != t.strides())
      return false;
    const Storage* storage = key->storage.get();
    int32_t alias = external_on.find(storage);
    for (size_t j = 0; j < new_externals->size() && alias < 0; ++j)
      if ((*new_externals)[j].impl()->storage.get() == storage)
        alias = base + static_cast<int32_t>(j);
    if (alias != g.alias_of) return false;
    new_externals->push_back(t);
    return true;
  };
  auto mismatch = [&] {
    new_externals->clear();
    for (int16_t s : bound) symbol_values[s] = 0;
    return false;
  };
  for (size_t i = 0; i < call.inputs.size(); ++i)
    if (!check(call.inputs[i], edge.inputs[i])) return mismatch();
  if (target && !check(*target, edge.target)) return mismatch();
  if (guard != edge.new_guards.size()) return mismatch();
  if (edge.bounds.any() && !match_bounds(edge, call, index_values)) return mismatch();
  return true;
}

InputRef Walk::ref_for(const Tensor& t, bool fresh, TraceOp* op,
                       std::vector<Tensor>* new_externals) const {
  const TensorImpl* key = t.impl();
  if (!fresh) {
    const int value = values.find(key);
    if (value >= 0) return InputRef{InputRef::Kind::Value, value};
    const int slot = external_of.find(key);
    if (slot >= 0) return InputRef{InputRef::Kind::External, slot};
  }
  const int32_t base = fresh ? 0 : static_cast<int32_t>(externals.size());
  for (size_t i = 0; i < new_externals->size(); ++i)
    if ((*new_externals)[i].impl() == key)
      return InputRef{InputRef::Kind::External, base + static_cast<int32_t>(i)};
  const Storage* storage = key->storage.get();
  KILN_CHECK(storage != nullptr, Error,
             "[trace] a tensor's value is unavailable: the traced computation that produces it "
             "failed earlier");
  int32_t alias = fresh ? -1 : external_on.find(storage);
  for (size_t i = 0; i < new_externals->size() && alias < 0; ++i)
    if ((*new_externals)[i].impl()->storage.get() == storage)
      alias = base + static_cast<int32_t>(i);
  // TensorGuard::of(t, alias), made in place (a guard is costly to move).
  TensorGuard& guard = op->new_guards.emplace_back();
  guard.dtype = t.dtype();
  guard.device = t.device();
  guard.sizes = t.sizes();
  guard.strides = t.strides();
  guard.alias_of = alias;
  new_externals->push_back(t);
  return InputRef{InputRef::Kind::External, base + static_cast<int32_t>(new_externals->size()) - 1};
}

TraceOp Walk::describe(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                       std::vector<Tensor>* new_externals, bool fresh) const {
  TraceOp op;
  describe_into(&op, call, meta, target, new_externals, fresh);
  return op;
}

void Walk::describe_into(TraceOp* op, const OpCall& call, const OutputMeta& meta,
                         const Tensor* target, std::vector<Tensor>* new_externals,
                         bool fresh) const {
  op->op = call.op;
  op->attrs = call.attrs;
  op->meta = meta;
  // Fresh, every input is a new external (but repeats): one allocation for them.
  if (fresh && new_externals->empty())
    new_externals->reserve(call.inputs.size() + (target ? 1 : 0));
  for (const Tensor& in : call.inputs) op->inputs.push_back(ref_for(in, fresh, op, new_externals));
  for (const Scalar& s : call.scalars) op->scalar_kinds.push_back(s.kind());
  if (target) {
    op->in_place = true;
    op->target = ref_for(*target, fresh, op, new_externals);
  }
}

void Walk::commit(TraceNode* next, const OpCall& call, std::vector<Tensor>& new_externals,
                  const Tensor& value, bool exact_meta) {
  node = next;
  for (Tensor& t : new_externals) {
    const int index = static_cast<int>(externals.size());
    external_of.set(t.impl_ptr(), index);
    if (const Storage* storage = t.impl()->storage.get()) external_on.insert_first(storage, index);
    externals.push_back(std::move(t));
  }
  new_externals.clear();
  for (const Scalar& s : call.scalars) scalars.push_back(s);
  node->last_use = tick;
  if (node->op.site == 0 || node->op.site != run_site || node->op.op != run_op) {
    run_op = node->op.op;
    run_site = node->op.site;
    run_start = node->depth;
  }
  outputs.push_back(value.impl_ptr());
  exact.push_back(exact_meta);
  // Eager walks only (recording, warming up; a compiled path's lazy walk already has its
  // plan): every 64 ops, the values made 64 or more ops ago that are still held.
  if (!pending_token && outputs.size() % kHeldLongOps == 0 && outputs.size() >= 2 * kHeldLongOps) {
    seen_held.resize(outputs.size(), 0);
    for (size_t i = 0; i + kHeldLongOps < outputs.size(); ++i)
      if (!outputs[i].expired()) seen_held[i] = static_cast<int32_t>(outputs.size());
  }
  values.set(value.impl_ptr(), node->depth - 1);
  if (node->op.in_place && value.impl()->storage) written.push_back(value.impl()->storage.get());
}

bool Walk::single_exact_input(const OpCall& call) const {
  if (call.inputs.size() != 1 || !call.inputs[0].defined()) return false;
  const int value = values.find(call.inputs[0].impl());
  return value >= 0 && static_cast<size_t>(value) < exact.size() && exact[value] != 0;
}

bool Walk::depends_on(const TensorImpl* t) const {
  if (t->storage == nullptr || values.find(t) >= 0) return true;
  return std::find(written.begin(), written.end(), t->storage.get()) != written.end();
}

Walk::Producers Walk::producers(int value) const {
  const std::vector<const TraceOp*> ops = node->path();
  std::vector<bool> seen(ops.size(), false);
  std::vector<int> stack = {value};
  Producers found;
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    if (i < 0 || i >= static_cast<int>(ops.size()) || seen[i]) continue;
    seen[i] = true;
    if (ops[i]->site != 0) found.sites.push_back(ops[i]->site);
    for (const InputRef& in : ops[i]->inputs) {
      if (in.kind == InputRef::Kind::Value)
        stack.push_back(in.index);
      else
        found.externals.push_back(externals[in.index].impl());
    }
    if (ops[i]->in_place) found.externals.push_back(nullptr);  // writes: never host-side
  }
  return found;
}

Tensor Walk::make_lazy(const OutputMeta& meta) {
  auto impl = std::allocate_shared<TensorImpl>(CachedBlockAllocator<TensorImpl>());
  impl->sizes = meta.sizes;
  impl->strides = meta.strides;
  impl->offset = meta.offset;
  impl->dtype = meta.dtype;
  impl->device = meta.device;
  impl->refresh();
  if (!pending_token) pending_token = std::make_shared<LazyToken>();
  impl->pending = pending_token;
  lazy::tls_pending = true;
  return Tensor(std::move(impl));
}

TraceProgram Walk::program() const {
  TraceProgram program;
  const std::vector<const TraceOp*> path = node->path();
  // Below a symbolic op a node's meta may be another size's: the walk's own is needed.
  KILN_CHECK(!anchor || !anchor->symbolic || metas.size() >= path.size(), Error,
             "[trace] internal error: a walk under a symbolic anchor kept the metadata of ",
             metas.size(), " of its ", path.size(), " ops");
  for (const TraceOp* op : path) {
    program.ops.push_back(*op);
    TraceOp& copy = program.ops.back();
    if (program.ops.size() <= metas.size()) copy.meta = metas[program.ops.size() - 1];
    // Symbolic bounds made exact at this walk's values (it bound every one it passed).
    if (copy.bounds.any()) {
      const int16_t symbol[2] = {copy.bounds.start, copy.bounds.end};
      int64_t* field[2] = {&copy.attrs.start, &copy.attrs.end};
      for (int f = 0; f < 2; ++f)
        if (symbol[f] >= 0 && static_cast<size_t>(symbol[f]) < index_values.size() &&
            index_values[symbol[f]])
          *field[f] = *index_values[symbol[f]];
      copy.bounds = SymbolicBounds{};
    }
    for (size_t k = 0; k < copy.new_guards.size(); ++k) {
      TensorGuard& g = copy.new_guards[k];
      const size_t slot = static_cast<size_t>(program.num_externals) + k;
      if (g.symbolic() && slot < externals.size()) g = TensorGuard::of(externals[slot], g.alias_of);
    }
    program.num_scalars += static_cast<int>(op->scalar_kinds.size());
    program.num_externals += static_cast<int>(op->new_guards.size());
  }
  program.live.resize(program.ops.size());
  for (size_t i = 0; i < program.ops.size() && i < outputs.size(); ++i)
    program.live[i] = !outputs[i].expired();
  program.held.assign(program.ops.size(), false);
  std::vector<int32_t> last_read(program.ops.size());
  for (size_t j = 0; j < program.ops.size(); ++j) {
    last_read[j] = static_cast<int32_t>(j);
    const TraceOp& op = program.ops[j];
    for (const InputRef& r : op.inputs)
      if (r.kind == InputRef::Kind::Value) last_read[r.index] = static_cast<int32_t>(j);
    if (op.in_place && op.target.kind == InputRef::Kind::Value)
      last_read[op.target.index] = static_cast<int32_t>(j);
  }
  for (size_t i = 0; i < program.ops.size() && i < seen_held.size(); ++i)
    program.held[i] =
        seen_held[i] >= last_read[i] + static_cast<int32_t>(kHeldLongOps) && !program.live[i];
  return program;
}

LoopClose Walk::closes_loop(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                            const TraceOp& op, bool loops_allowed, Fresh* fresh_out) {
  // Inside a region (compile(fn), Region) the region's edges end traces: no loop closing.
  // Nor inside kiln's own loops (a backward pass, an optimizer step).
  if (at_root() || !loops_allowed) return LoopClose::No;
  // The same op at the same site on the very same inputs as earlier in this walk: a loop
  // body reading values made before the loop (x = tensor(...); for ...: y = f(x)) has come
  // round again. Sites are exact (user_site.h), so `(x - mu) * (x - mu)` is two sites and
  // does not close. Scalars must repeat too (x * 2.0 and 1.0 * x are the same wiring,
  // not a loop). An op without tensor inputs (a factory: zeros, a scalar constant)
  // repeating says nothing about loops: a backward pass makes the same constants as its
  // forward.
  const bool has_inputs = !op.inputs.empty();
  // Ops from this depth on are in the run the op would continue (walk.h: run_start).
  const int run_from =
      op.site != 0 && op.site == run_site && op.op == run_op ? run_start : node->depth + 1;
  bool repeats = false;
  int scanned = 0;
  size_t scalar_end = scalars.size();
  for (const TraceNode* n = node; n && n != &anchor->root && scanned < 1024;
       n = n->parent, ++scanned) {
    const size_t count = n->op.scalar_kinds.size();
    // Or on the same values made earlier in the walk and a fresh external where it had
    // one: a loop body reading weights made before the loop (in the same walk: no host
    // read between the setup and the loop) and a new batch (for ...: y = f(load(i)) @ w).
    // A layer repeated inside the step reads the previous layer's output, made after its
    // first occurrence: not this.
    if (has_inputs && n->depth < run_from && n->op.op == op.op && !op.in_place &&
        n->op.site == op.site && (n->op.same_wiring(op) || op.same_but_fresh_externals(n->op)) &&
        scalar_end >= count) {
      bool same = true;
      for (size_t k = 0; k < count && same; ++k)
        same = same_scalar(scalars[scalar_end - count + k], call.scalars[k]);
      if (same) {
        repeats = true;
        break;
      }
    }
    scalar_end -= std::min(scalar_end, count);
  }
  if (repeats) return LoopClose::AtHead;
  for (const InputRef& r : op.inputs)
    if (r.kind != InputRef::Kind::External) return LoopClose::No;
  if (op.in_place && op.target.kind != InputRef::Kind::External) return LoopClose::No;
  // Closing, the fresh description is the next walk's first op: handed out, not redone
  // (described in place: a TraceOp is costly to move).
  Fresh local;
  Fresh& out = fresh_out ? *fresh_out : local;
  TraceOp& fresh = out.op;
  describe_into(&fresh, call, meta, target, &out.externals, true);
  fresh.site = op.site;
  auto closes = [&](LoopClose close) {
    out.set = true;
    return close;
  };
  if (run_from > 1 && fresh.same_place(anchor->first) && scalars.size() >= call.scalars.size() &&
      same_scalars(scalars.data(), anchor->first.scalar_kinds.size(), call))
    return closes(LoopClose::AtAnchor);
  if (!has_inputs) return LoopClose::No;
  for (const Head& head : heads)
    if (head.depth < run_from && fresh.same_place(head.op) &&
        same_scalars(head.scalars.data(), head.scalars.size(), call))
      return closes(LoopClose::AtHead);
  if (heads.size() < 16)
    heads.push_back(
        {fresh, std::vector<Scalar>(call.scalars.begin(), call.scalars.end()), node->depth + 1});
  return LoopClose::No;
}

// Recording, closes_loop notes each op whose inputs are all external as a head (a later
// op with the same wiring closes a loop there). A replayed op must be noted too, or the
// walk that replays a trace misses the heads of its replayed part and runs on past the
// op where the recording closed its loop: the trace diverges there and recompiles one
// head further each time (a training step's per-parameter optimizer updates never
// replayed, growing by one parameter per step).
void Walk::note_replayed_head(const OpCall& call, const Tensor* target, const TraceOp& edge,
                              bool loops_allowed) {
  if (at_root() || !loops_allowed || heads.size() >= 16 || !all_inputs_external(edge)) return;
  // A head is only compared (closes_loop: TraceOp::same_place, the scalars, the depth), so
  // it holds what same_place reads of the op described fresh (describe(..., true)): the
  // op, the call's attributes, its scalar kinds, its inputs numbered by first appearance,
  // as many guards as distinct inputs (their contents unread), the site. The edge's
  // references tell the distinct inputs apart: the walk gives one tensor one slot. A
  // tensor without memory is left to describe, which refuses it as before.
  for (const Tensor& in : call.inputs)
    if (in.impl()->storage == nullptr) return note_head_described(call, target);
  if (target && target->impl()->storage == nullptr) return note_head_described(call, target);
  Head& head = heads.emplace_back();
  TraceOp& op = head.op;
  op.op = call.op;
  op.attrs = call.attrs;
  boost::container::small_vector<int32_t, 4> slots;  // the edge's slot of each fresh one
  auto fresh_ref = [&](const InputRef& r) {
    for (size_t j = 0; j < slots.size(); ++j)
      if (slots[j] == r.index) return InputRef{InputRef::Kind::External, static_cast<int32_t>(j)};
    slots.push_back(r.index);
    op.new_guards.emplace_back();
    return InputRef{InputRef::Kind::External, static_cast<int32_t>(slots.size()) - 1};
  };
  for (const InputRef& r : edge.inputs) op.inputs.push_back(fresh_ref(r));
  for (const Scalar& s : call.scalars) op.scalar_kinds.push_back(s.kind());
  if (target) {
    op.in_place = true;
    op.target = fresh_ref(edge.target);
  }
  op.site = current_op_site();
  head.scalars.assign(call.scalars.begin(), call.scalars.end());
  head.depth = node->depth + 1;
}

void Walk::note_head_described(const OpCall& call, const Tensor* target) {
  std::vector<Tensor> fresh_externals;
  TraceOp fresh = describe(call, OutputMeta{}, target, &fresh_externals, true);
  fresh.site = current_op_site();
  heads.push_back({std::move(fresh), std::vector<Scalar>(call.scalars.begin(), call.scalars.end()),
                   node->depth + 1});
}

}  // namespace kiln::tracer
