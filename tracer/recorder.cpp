#include "tracer/recorder.h"

#include "ops/autograd/record.h"
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "runtime/error.h"
#include "tracer/api.h"
#include "tracer/config.h"
#include "tracer/profiler.h"

namespace kiln::tracer {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct LazyToken final : PendingValue {};

// What a lazy value the user holds points to once the walk that owed it failed.
struct FailedValue final : PendingValue {
  std::string why;
  const char* failure() const override { return why.c_str(); }
};

// Sets a flag for the duration of a scope (re-entrancy guard).
class FlagScope {
 public:
  explicit FlagScope(bool& flag) : flag_(flag), saved_(flag) { flag_ = true; }
  ~FlagScope() { flag_ = saved_; }
  FlagScope(const FlagScope&) = delete;
  FlagScope& operator=(const FlagScope&) = delete;

 private:
  bool& flag_;
  bool saved_;
};

DispatchHook* make_hook() { return &TraceRecorder::current(); }
void flush_hook() { TraceRecorder::current().flush(); }
void sync_hook(const char* reason, const SourceSite& site) {
  TraceRecorder::current().on_sync(reason, current_site(site));
}

struct Registration {
  Registration() {
    set_dispatch_hook_factory(make_hook);
    lazy::set_hooks(flush_hook, sync_hook);
  }
} registration;

// Largest |a - b| relative to max |b|, over all elements (host read, untraced).
double relative_error(const Tensor& a, const Tensor& b) {
  NoHookScope untraced;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    if (std::isnan(x[i])) continue;
    err = std::max(err, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return err / std::max(scale, 1e-30);
}

}  // namespace

const char* break_reason_text(BreakReason reason) {
  switch (reason) {
#define KILN_BREAK(id, phase, text) \
  case BreakReason::id:             \
    return text;
#include "tracer/break_reasons.def"
#undef KILN_BREAK
  }
  return "?";
}

TraceRecorder::TraceRecorder() : enabled_(config().auto_trace) {}
TraceRecorder::~TraceRecorder() = default;

TraceRecorder& TraceRecorder::current() {
  thread_local TraceRecorder recorder;
  return recorder;
}

bool TraceRecorder::on_call(const OpCall& call, const OutputMeta& meta, Tensor* result) {
  if (!active() || in_boundary_) return false;
  return handle(call, meta, nullptr, result);
}

bool TraceRecorder::on_call_into(const OpCall& call, const OutputMeta& meta, const Tensor& out) {
  if (!active() || in_boundary_) return false;
  return handle(call, meta, &out, nullptr);
}

bool TraceRecorder::handle(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                           Tensor* result) {
  if (call.op == OpId::ToDevice && meta.device.is_cpu() && !call.inputs[0].device().is_cpu()) {
    on_sync(std::string("a copy to the host (.cpu() / .to(\"cpu\")) ") +
                break_reason_text(BreakReason::CopyToHost),
            current_site());
    return false;  // runs eagerly, outside any trace
  }
  if (mode_ == Mode::EagerSingle) {
    const TraceOp& first = anchor_->first;
    if (call.op == first.op && call.inputs.size() == first.inputs.size() &&
        call.attrs == first.attrs)
      return false;  // the same op again: it runs eagerly, as it is hot and alone
    end_walk(Boundary::Loop, "", {});
  }
  std::vector<Tensor> new_externals;
  if (mode_ == Mode::Replay) {  // fast path: the call is the next op of the hot trace
    for (const auto& c : node_->children) {
      if (c->plans_below > 0 && match_call(c->op, call, target, &new_externals)) {
        note_replayed_head(call, meta, target, c->op);
        // An in-place op's write into *target waits for the plan too: a read of any
        // memory before then (a host write into an input it reads) must run it first.
        if (target) lazy::tls_pending = true;
        Tensor value = target ? *target : make_lazy(meta);
        node_ = c.get();
        commit(call, new_externals, value);
        ++ops_replayed_;
        if (result) *result = value;
        return true;
      }
    }
    new_externals.clear();
  }
  TraceOp op;
  if (mode_ == Mode::Idle) {
    op = describe(call, meta, target, &new_externals, true);
    begin_walk(op);
  } else {
    op = describe(call, meta, target, &new_externals, false);
    TraceNode* child = mode_ == Mode::Replay ? node_->find_child(op) : nullptr;
    const bool continues = child && child->plans_below > 0;
    TraceOp fresh;
    std::vector<Tensor> fresh_externals;
    if (!continues && closes_loop(call, meta, target, op, &fresh, &fresh_externals)) {
      end_walk(Boundary::Loop, "", {});
      // Described again now that the ended walk's values exist (they may have been lazy).
      new_externals.clear();
      op = describe(call, meta, target, &new_externals, true);
      begin_walk(op);
    }
    if (mode_ != Mode::Idle && node_->depth >= config().max_trace_length) {
      end_walk(Boundary::Break,
               detail::cat(break_reason_text(BreakReason::TraceTooLong), " of ",
                           config().max_trace_length, " ops"),
               current_site());
      new_externals.clear();
      op = describe(call, meta, target, &new_externals, true);
      begin_walk(op);
    }
  }

  if (mode_ == Mode::Eager || mode_ == Mode::EagerSingle) return false;
  if (mode_ == Mode::Replay) {
    TraceNode* child = node_->find_child(op);
    if (child && child->plans_below > 0) {
      note_replayed_head(call, meta, target, child->op);
      if (target) lazy::tls_pending = true;  // the in-place write is pending (see above)
      Tensor value = target ? *target : make_lazy(meta);
      node_ = child;
      commit(call, new_externals, value);
      ++ops_replayed_;
      if (result) *result = value;
      return true;
    }
    std::string why;
    for (const auto& c : node_->children) {
      const std::string d = c->op.guard_diff(op);
      if (!d.empty()) {
        why = d;
        break;
      }
    }
    if (why.empty()) {
      why = detail::cat(break_reason_text(BreakReason::Diverged), " at op ", node_->depth + 1,
                        ": expected ",
                        node_->children.empty() ? std::string("the trace to end")
                                                : std::string(op_name(node_->children[0]->op.op)),
                        ", got ", op_name(op.op));
    }
    side_exit(why);
  }
  // Record: run eagerly now and append to the trie.
  const int64_t start = now_ns();
  Tensor value;
  if (target) {
    execute_into(call, meta, *target);
    value = *target;
  } else {
    value = execute(call, meta);
  }
  walk_eager_ns_ += now_ns() - start;
  TraceNode* child = node_->find_child(op);
  if (!child) {
    child = node_->add_child(op);
    ++nodes_;
  }
  node_ = child;
  commit(call, new_externals, value);
  ++ops_recorded_;
  if (result) *result = value;
  return true;
}

bool TraceRecorder::match_call(const TraceOp& edge, const OpCall& call, const Tensor* target,
                               std::vector<Tensor>* new_externals) const {
  if (edge.op != call.op || edge.inputs.size() != call.inputs.size() ||
      edge.in_place != (target != nullptr) || edge.scalar_kinds.size() != call.scalars.size())
    return false;
  for (size_t i = 0; i < call.scalars.size(); ++i)
    if (edge.scalar_kinds[i] != call.scalars[i].kind()) return false;
  if (!(edge.attrs == call.attrs)) return false;
  size_t guard = 0;
  const int32_t base = static_cast<int32_t>(externals_.size());
  auto check = [&](const Tensor& t, const InputRef& ref) {
    const TensorImpl* key = t.impl();
    const int value = values_.find(key);
    if (value >= 0) return ref.kind == InputRef::Kind::Value && ref.index == value;
    if (ref.kind != InputRef::Kind::External) return false;
    const int slot = external_of_.find(key);
    if (slot >= 0) return ref.index == slot;
    for (size_t j = 0; j < new_externals->size(); ++j)
      if ((*new_externals)[j].impl() == key) return ref.index == base + static_cast<int32_t>(j);
    if (ref.index != base + static_cast<int32_t>(new_externals->size()) ||
        guard >= edge.new_guards.size())
      return false;
    const TensorGuard& g = edge.new_guards[guard++];
    if (g.dtype != t.dtype() || g.device != t.device() || g.sizes != t.sizes() ||
        g.strides != t.strides() || key->storage == nullptr)
      return false;
    int32_t alias = -1;
    const Storage* storage = key->storage.get();
    for (size_t j = 0; j < externals_.size() && alias < 0; ++j)
      if (externals_[j].impl()->storage.get() == storage) alias = static_cast<int32_t>(j);
    for (size_t j = 0; j < new_externals->size() && alias < 0; ++j)
      if ((*new_externals)[j].impl()->storage.get() == storage)
        alias = base + static_cast<int32_t>(j);
    if (alias != g.alias_of) return false;
    new_externals->push_back(t);
    return true;
  };
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    if (!check(call.inputs[i], edge.inputs[i])) {
      new_externals->clear();
      return false;
    }
  }
  if (target && !check(*target, edge.target)) {
    new_externals->clear();
    return false;
  }
  if (guard != edge.new_guards.size()) {
    new_externals->clear();
    return false;
  }
  return true;
}

bool TraceRecorder::closes_loop(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                                const TraceOp& op, TraceOp* fresh,
                                std::vector<Tensor>* fresh_externals) {
  // Inside a region (compile(fn), Region) the region's edges end traces: no loop closing.
  // Nor inside kiln's own loops (a backward pass, an optimizer step).
  if (node_ == &anchor_->root || !regions_.empty() || autograd::tls_library_loop_depth > 0)
    return false;
  auto same_scalars = [&](const Scalar* a, size_t count) {
    if (count != call.scalars.size()) return false;
    for (size_t k = 0; k < count; ++k) {
      const Scalar& b = call.scalars[k];
      if (a[k].kind() != b.kind() || a[k].to_double() != b.to_double() ||
          a[k].to_int() != b.to_int())
        return false;
    }
    return true;
  };
  // The same op on the very same inputs as earlier in this walk: a loop body reading values
  // made before the loop (x = tensor(...); for ...: y = f(x)) has come round again.
  // Scalars must repeat too (x * 2.0 and 1.0 * x are the same wiring, not a loop).
  // An op without tensor inputs (a factory: zeros, a scalar constant) repeating says
  // nothing about loops: a backward pass makes the same constants as its forward.
  const bool has_inputs = !op.inputs.empty();
  bool repeats = false;
  int scanned = 0;
  size_t scalar_end = scalars_.size();
  for (const TraceNode* n = node_; n && n != &anchor_->root && scanned < 1024;
       n = n->parent, ++scanned) {
    const size_t count = n->op.scalar_kinds.size();
    if (has_inputs && n->op.op == op.op && !op.in_place && n->op.same_wiring(op) &&
        scalar_end >= count) {
      bool same = true;
      for (size_t k = 0; k < count && same; ++k) {
        const Scalar& a = scalars_[scalar_end - count + k];
        const Scalar& b = call.scalars[k];
        same = a.kind() == b.kind() && a.to_double() == b.to_double() && a.to_int() == b.to_int();
      }
      if (same) {
        repeats = true;
        break;
      }
    }
    scalar_end -= std::min(scalar_end, count);
  }
  for (const InputRef& r : op.inputs)
    if (r.kind != InputRef::Kind::External && !repeats) return false;
  if (repeats) return true;
  if (op.in_place && op.target.kind != InputRef::Kind::External) return false;
  *fresh = describe(call, meta, target, fresh_externals, true);
  if (fresh->same_wiring(anchor_->first) && scalars_.size() >= call.scalars.size() &&
      same_scalars(scalars_.data(), anchor_->first.scalar_kinds.size()))
    return true;
  if (!has_inputs) {
    fresh_externals->clear();
    return false;
  }
  for (const auto& [head, values] : walk_heads_)
    if (fresh->same_wiring(head) && same_scalars(values.data(), values.size())) return true;
  if (walk_heads_.size() < 16)
    walk_heads_.push_back({*fresh, std::vector<Scalar>(call.scalars.begin(), call.scalars.end())});
  fresh_externals->clear();
  return false;
}

// Recording, closes_loop notes each op whose inputs are all external as a walk head (a
// later op with the same wiring closes a loop there). A replayed op must be noted too, or
// the walk that replays a trace misses the heads of its replayed part and runs on past
// the op where the recording closed its loop: the trace diverges there and recompiles
// one head further each time (a training step's per-parameter optimizer updates never
// replayed, growing by one parameter per step).
void TraceRecorder::note_replayed_head(const OpCall& call, const OutputMeta& meta,
                                       const Tensor* target, const TraceOp& edge) {
  if (node_ == &anchor_->root || !regions_.empty() || autograd::tls_library_loop_depth > 0 ||
      edge.inputs.empty() || walk_heads_.size() >= 16)
    return;
  for (const InputRef& r : edge.inputs)
    if (r.kind != InputRef::Kind::External) return;
  if (edge.in_place && edge.target.kind != InputRef::Kind::External) return;
  std::vector<Tensor> fresh_externals;
  walk_heads_.push_back({describe(call, meta, target, &fresh_externals, true),
                         std::vector<Scalar>(call.scalars.begin(), call.scalars.end())});
}

InputRef TraceRecorder::ref_for(const Tensor& t, bool fresh, TraceOp* op,
                                std::vector<Tensor>* new_externals) const {
  const TensorImpl* key = t.impl();
  if (!fresh) {
    const int value = values_.find(key);
    if (value >= 0) return InputRef{InputRef::Kind::Value, value};
    const int slot = external_of_.find(key);
    if (slot >= 0) return InputRef{InputRef::Kind::External, slot};
  }
  const int32_t base = fresh ? 0 : static_cast<int32_t>(externals_.size());
  for (size_t i = 0; i < new_externals->size(); ++i)
    if ((*new_externals)[i].impl() == key)
      return InputRef{InputRef::Kind::External, base + static_cast<int32_t>(i)};
  const Storage* storage = key->storage.get();
  KILN_CHECK(storage != nullptr, Error,
             "[trace] a tensor's value is unavailable: the traced computation that produces it "
             "failed earlier");
  int32_t alias = -1;
  if (!fresh) {
    for (size_t j = 0; j < externals_.size() && alias < 0; ++j)
      if (externals_[j].impl()->storage.get() == storage) alias = static_cast<int32_t>(j);
  }
  for (size_t i = 0; i < new_externals->size() && alias < 0; ++i)
    if ((*new_externals)[i].impl()->storage.get() == storage)
      alias = base + static_cast<int32_t>(i);
  op->new_guards.push_back(TensorGuard::of(t, alias));
  new_externals->push_back(t);
  return InputRef{InputRef::Kind::External, base + static_cast<int32_t>(new_externals->size()) - 1};
}

TraceOp TraceRecorder::describe(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                                std::vector<Tensor>* new_externals, bool fresh) const {
  TraceOp op;
  op.op = call.op;
  op.attrs = call.attrs;
  op.meta = meta;
  for (const Tensor& in : call.inputs) op.inputs.push_back(ref_for(in, fresh, &op, new_externals));
  for (const Scalar& s : call.scalars) op.scalar_kinds.push_back(s.kind());
  if (target) {
    op.in_place = true;
    op.target = ref_for(*target, fresh, &op, new_externals);
  }
  return op;
}

int TraceRecorder::warmup_for_new_anchor() const {
  for (auto it = regions_.rbegin(); it != regions_.rend(); ++it)
    if (it->warmup >= 1) return it->warmup;
  return config().warmup;
}

void TraceRecorder::begin_walk(const TraceOp& first) {
  Anchor* anchor = nullptr;
  for (const auto& a : anchors_) {
    if (a->first.same_wiring(first)) {
      anchor = a.get();
      break;
    }
  }
  if (!anchor) {
    anchors_.push_back(std::make_unique<Anchor>());
    ++nodes_;
    anchor = anchors_.back().get();
    anchor->first = first;
    anchor->state.warmup = warmup_for_new_anchor();
    anchor->state.site = current_site();
  }
  anchor_ = anchor;
  node_ = &anchor->root;
  node_->last_use = ++tick_;
  mode_ = anchor->state.eager_only       ? Mode::Eager
          : anchor->root.plans_below > 0 ? Mode::Replay
          : anchor->state.single_op      ? Mode::EagerSingle
                                         : Mode::Record;
}

void TraceRecorder::commit(const OpCall& call, std::vector<Tensor>& new_externals,
                           const Tensor& value) {
  for (Tensor& t : new_externals) {
    const int index = static_cast<int>(externals_.size());
    external_of_.set(t.impl_ptr(), index);
    externals_.push_back(std::move(t));
  }
  new_externals.clear();
  for (const Scalar& s : call.scalars) scalars_.push_back(s);
  const int index = node_->depth - 1;
  node_->last_use = tick_;
  outputs_.push_back(value.impl_ptr());
  values_.set(value.impl_ptr(), index);
}

Tensor TraceRecorder::make_lazy(const OutputMeta& meta) {
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = meta.sizes;
  impl->strides = meta.strides;
  impl->offset = meta.offset;
  impl->dtype = meta.dtype;
  impl->device = meta.device;
  impl->refresh();
  if (!pending_token_) pending_token_ = std::make_shared<LazyToken>();
  impl->pending = pending_token_;
  lazy::tls_pending = true;
  return Tensor(std::move(impl));
}

TraceProgram TraceRecorder::program_for(TraceNode* node) const {
  TraceProgram program;
  for (const TraceOp* op : node->path()) {
    program.ops.push_back(*op);
    program.num_scalars += static_cast<int>(op->scalar_kinds.size());
    program.num_externals += static_cast<int>(op->new_guards.size());
  }
  program.live.resize(program.ops.size());
  for (size_t i = 0; i < program.ops.size() && i < outputs_.size(); ++i)
    program.live[i] = !outputs_[i].expired();
  return program;
}

void TraceRecorder::bind_outputs(const std::vector<Tensor>& values) {
  for (size_t i = 0; i < outputs_.size() && i < values.size(); ++i) {
    std::shared_ptr<TensorImpl> impl = outputs_[i].lock();
    if (!impl || impl->storage || !values[i].defined()) continue;
    const TensorImpl* v = values[i].impl();
    impl->storage = v->storage;
    impl->offset = v->offset;
    impl->sizes = v->sizes;
    impl->strides = v->strides;
    impl->refresh();
    impl->pending.reset();
  }
}

void TraceRecorder::materialize(size_t count) {
  lazy::tls_pending = false;
  if (count == 0) return;
  FlagScope guard(in_boundary_);
  const TraceProgram program = program_for(node_);
  profiler::Span span(profiler::Kind::Materialize, program.ops[0].meta.device, [&] {
    return detail::cat("materialize ", count, " op(s) eagerly (trace at ",
                       anchor_->state.site.str(), ")");
  });
  std::vector<Tensor> values;
  const int64_t start = now_ns();
  interpret(program, count, externals_, scalars_, values);
  walk_eager_ns_ += now_ns() - start;
  bind_outputs(values);
}

void TraceRecorder::side_exit(const std::string& why) {
  walk_guard_failure_ = why;
  // Charge the side exit to the compiled trace the walk was following.
  for (TraceNode* n = node_; n;) {
    if (n->plan) {
      ++n->plan->side_exits;
      break;
    }
    TraceNode* next = nullptr;
    for (const auto& c : n->children)
      if (c->plans_below > 0) next = c.get();
    n = next;
  }
  if (logging(kLogGuards)) {
    log_line(kLogGuards, detail::cat("trace at ", anchor_->state.site.str(), " side exit after op ",
                                     node_->depth, " -- ",
                                     why.find("input in") == 0 ? "guard failed: " + why : why));
  }
  try {
    materialize(static_cast<size_t>(node_ == &anchor_->root ? 0 : node_->depth));
  } catch (...) {
    fail_pending_values(std::current_exception());
    clear_walk();
    throw;
  }
  mode_ = Mode::Record;
}

void TraceRecorder::flush() {
  if (!lazy::tls_pending || in_boundary_) return;
  if (mode_ == Mode::Replay) side_exit("a tensor's memory was read while the trace was pending");
  lazy::tls_pending = false;
}

void TraceRecorder::end_walk(Boundary kind, const std::string& reason, const UserSite& site) {
  if (mode_ == Mode::Idle) return;
  FlagScope guard(in_boundary_);
  std::optional<profiler::Span> break_span;
  if ((kind == Boundary::Break || kind == Boundary::Abort) && profiler::tls_active) {
    break_span.emplace(profiler::Kind::GraphBreak, Device(DeviceType::CPU), [&] {
      return detail::cat("graph break ", reason, " at ", site.known() ? site.short_file() : "?",
                         ":", site.line);
    });
  }
  bool ran_plan = false;
  try {
    if (mode_ == Mode::Replay && node_ != &anchor_->root) {
      if (node_->plan && kind != Boundary::Abort) {
        const CompiledTrace& plan = *node_->plan;
        lazy::tls_pending = false;
        std::vector<Tensor> values, reference;
        if (config().verify) {
          // Eager reference on copies of the inputs the trace writes in place.
          std::vector<Tensor> inputs = externals_;
          for (const TraceOp& op : plan.program.ops)
            if (op.in_place && op.target.kind == InputRef::Kind::External)
              inputs[op.target.index] = inputs[op.target.index].clone();
          interpret(plan.program, plan.program.ops.size(), inputs, scalars_, reference);
        }
        std::vector<bool> wanted(plan.program.ops.size(), false);
        for (size_t i = 0; i < wanted.size() && i < outputs_.size(); ++i)
          wanted[i] = !outputs_[i].expired();
        {
          profiler::Span span(profiler::Kind::Replay, plan.program.ops[0].meta.device,
                              [&] { return detail::cat("replay trace ", plan.id); });
          if (profiler::Event* e = span.event()) {
            e->trace_id = plan.id;
            e->backend = plan.executable->backend_name();
            e->kernels = plan.executable->kernel_count();
            e->ops = static_cast<int>(plan.program.ops.size());
          }
          const int64_t start = now_ns();
          plan.executable->run(externals_, scalars_, values, wanted);
          replay_ns_ += now_ns() - start;
          replay_ops_ += static_cast<int64_t>(plan.program.ops.size());
        }
        if (config().verify) {
          for (size_t i = 0; i < values.size(); ++i) {
            if (!plan.program.live[i] && !(i < outputs_.size() && !outputs_[i].expired())) continue;
            const double err = relative_error(values[i], reference[i]);
            KILN_CHECK(err <= 1e-4, Error, "[verify] trace ", plan.id, " op ", i, " (",
                       op_name(plan.program.ops[i].op),
                       "): compiled and eager results differ, "
                       "relative error ",
                       err);
          }
        }
        bind_outputs(values);
        ++plan.replays;
        ran_plan = true;
      } else {
        materialize(static_cast<size_t>(node_->depth));
      }
    }
  } catch (...) {
    fail_pending_values(std::current_exception());
    clear_walk();
    throw;
  }
  lazy::tls_pending = false;
  if (!ran_plan && mode_ != Mode::Eager && mode_ != Mode::EagerSingle && kind != Boundary::Abort &&
      node_ != &anchor_->root) {
    ++node_->endings;
    maybe_compile(node_, site);
  }
  const int64_t eager_ns = ran_plan ? 0 : walk_eager_ns_;
  const int64_t eager_ops = ran_plan || mode_ == Mode::Eager || mode_ == Mode::EagerSingle ||
                                    node_ == nullptr || node_ == &anchor_->root
                                ? 0
                                : node_->depth;
  clear_walk();
  if (kind == Boundary::Break || kind == Boundary::Abort) {
    note_break(reason, site, eager_ns, eager_ops);
    if (profiler::Event* e = break_span ? break_span->event() : nullptr) {
      e->reason = reason;
      e->file = site.file;
      e->line = site.line;
      e->function = site.function;
      e->eager_ns = eager_ns;
      e->ops = static_cast<int>(eager_ops);
    }
  }
  evict_lru();
}

void TraceRecorder::maybe_compile(TraceNode* node, const UserSite& site) {
  AnchorState& state = anchor_->state;
  if (!state.site.known() && site.known()) {  // C++: name the trace by where it ends
    state.site = site;
    state.site.function = "ends in " + site.function;
  }
  if (node->plan || state.eager_only || node->endings < state.warmup) return;
  if (node->depth < 2 && node->plans_below == 0) {  // one op: nothing to fuse
    if (!state.single_op) {
      state.single_op = true;
      log_line(kLogTrace, detail::cat("trace at ", state.site.str(), " is one op (",
                                      op_name(node->op.op), "): it stays eager"));
    }
    return;
  }
  TraceProgram program = program_for(node);
  const int trace_id = state.compiles == 0 ? next_trace_id_ : state.first_trace_id;
  profiler::Span span(profiler::Kind::Compile, Device(DeviceType::CPU),
                      [&] { return detail::cat("compile trace ", trace_id); });
  const int64_t start = now_ns();
  std::unique_ptr<Executable> executable = compile_trace(program);
  const double compile_ms = (now_ns() - start) / 1e6;
  if (!executable) return;
  if (profiler::Event* e = span.event()) {
    e->trace_id = trace_id;
    e->backend = executable->backend_name();
    e->kernels = executable->kernel_count();
    e->ops = static_cast<int>(program.ops.size());
  }
  auto plan = std::make_shared<CompiledTrace>();
  plan->generation = state.compiles;
  plan->id = state.compiles == 0 ? next_trace_id_++ : state.first_trace_id;
  plan->site = state.site;
  plan->compile_ms = compile_ms;
  for (const TraceOp& op : program.ops)
    for (const TensorGuard& g : op.new_guards) plan->guards.push_back(g);
  plan->program = std::move(program);
  plan->executable = std::move(executable);
  if (state.compiles == 0) state.first_trace_id = plan->id;
  if (state.compiles > 0) {
    ++state.recompiles;
    plan->recompile_reason =
        walk_guard_failure_.empty() ? "a new variant of the trace" : walk_guard_failure_;
    if (recompiles_.size() >= 1024)  // a report, not a log: keep the latest
      recompiles_.erase(recompiles_.begin(), recompiles_.begin() + 512);
    recompiles_.push_back(
        RecompileReport{plan->id, plan->generation, state.site.str(), plan->recompile_reason});
    log_line(kLogRecompiles,
             detail::cat("trace ", plan->id, "/", plan->generation,
                         " recompiled: ", plan->program.ops.size(), " ops -> ",
                         plan->executable->kernel_count(), " kernels at ", state.site.str(),
                         " -- guard failed: ", plan->recompile_reason));
    if (state.recompiles > config().recompile_limit) {
      state.eager_only = true;
      const std::string what = detail::cat(
          "trace ", plan->id, " at ", state.site.str(), " -- abort: recompiled ", state.recompiles,
          " times (limit ", config().recompile_limit, "; KILN_RECOMPILE_LIMIT); it stays eager");
      if (eager_anchors_.size() >= 1024)  // a report, not a log: keep the latest
        eager_anchors_.erase(eager_anchors_.begin(), eager_anchors_.begin() + 512);
      eager_anchors_.push_back(what);
      log_line(kLogRecompiles, what);
      return;
    }
  } else {
    log_line(kLogTrace, detail::cat("trace ", plan->id, " compiled: ", plan->program.ops.size(),
                                    " ops -> ", plan->executable->kernel_count(), " kernels (",
                                    plan->executable->backend_name(), ", ", compile_ms, " ms) at ",
                                    state.site.str()));
  }
  ++state.compiles;
  node->plan = plan;
  for (TraceNode* n = node; n; n = n->parent) ++n->plans_below;
  compiled_.push_back(std::move(plan));
}

void TraceRecorder::note_break(const std::string& reason, const UserSite& site, int64_t eager_ns,
                               int64_t eager_ops) {
  for (BreakStats& b : breaks_) {
    if (b.reason == reason && b.site == site) {
      ++b.count;
      b.eager_ns += eager_ns;
      b.eager_ops += eager_ops;
      return;
    }
  }
  breaks_.push_back(BreakStats{reason, site, 1, eager_ns, eager_ops});
  log_line(kLogGraphBreaks, detail::cat("graph break at ", site.str(), ": ", reason));
}

void TraceRecorder::on_sync(const std::string& reason, const UserSite& site) {
  if (mode_ == Mode::Idle || in_boundary_) return;
  end_walk(Boundary::Break, reason, site);
  for (const RegionOptions& r : regions_) {
    if (r.fullgraph) {
      throw GraphBreakError(detail::cat("[fullgraph] graph break in region '", r.name, "' at ",
                                        site.str(), ": ", reason));
    }
  }
}

void TraceRecorder::region_enter(const RegionOptions& options, const UserSite& site) {
  end_walk(Boundary::Region, "", {});
  regions_.push_back(options);
  region_sites_.push_back(site);
}

void TraceRecorder::region_exit(bool by_exception) {
  // The region ends even when ending its walk throws (pending work that runs out of
  // memory): a region left open would keep every later op of this thread in region mode.
  struct Pop {
    TraceRecorder& r;
    ~Pop() {
      if (!r.regions_.empty()) {
        r.regions_.pop_back();
        r.region_sites_.pop_back();
      }
    }
  } pop{*this};
  if (by_exception) {
    end_walk(Boundary::Abort, break_reason_text(BreakReason::UserException),
             region_sites_.empty() ? UserSite{} : region_sites_.back());
  } else {
    end_walk(Boundary::Region, "", {});
  }
}

void TraceRecorder::set_enabled(bool on) {
  if (!on) end_walk(Boundary::Region, "", {});
  enabled_ = on;
}

void TraceRecorder::fail_pending_values(std::exception_ptr error) {
  auto failed = std::make_shared<FailedValue>();
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    failed->why = e.what();
  } catch (...) {
    failed->why = "an exception that is not a std::exception";
  }
  for (const std::weak_ptr<TensorImpl>& w : outputs_) {
    if (std::shared_ptr<TensorImpl> impl = w.lock(); impl && !impl->storage) impl->pending = failed;
  }
}

void TraceRecorder::clear_walk() {
  mode_ = Mode::Idle;
  node_ = nullptr;
  anchor_ = nullptr;
  externals_.clear();
  scalars_.clear();
  outputs_.clear();
  values_.clear();
  external_of_.clear();
  pending_token_.reset();
  walk_eager_ns_ = 0;
  walk_guard_failure_.clear();
  walk_heads_.clear();
  lazy::tls_pending = false;
}

void TraceRecorder::reset() {
  end_walk(Boundary::Region, "", {});
  anchors_.clear();
  compiled_.clear();
  breaks_.clear();
  recompiles_.clear();
  eager_anchors_.clear();
  ops_recorded_ = ops_replayed_ = 0;
  replay_ns_ = replay_ops_ = 0;
  next_trace_id_ = 1;
  nodes_ = 0;
  evicted_traces_ = evicted_ops_ = 0;
}

void TraceRecorder::evict_lru() {
  const int64_t op_cap = std::max<int64_t>(config().trace_cache_ops, 1);
  const int64_t plan_cap = std::max(config().max_traces, 1);
  if (mode_ != Mode::Idle ||
      (nodes_ <= op_cap && static_cast<int64_t>(compiled_.size()) <= plan_cap))
    return;
  // The ticks of every node and of every node holding a plan.
  std::vector<uint64_t> node_ticks, plan_ticks;
  node_ticks.reserve(static_cast<size_t>(nodes_));
  std::vector<const TraceNode*> stack;
  for (const auto& a : anchors_) {
    stack.push_back(&a->root);
    while (!stack.empty()) {
      const TraceNode* n = stack.back();
      stack.pop_back();
      node_ticks.push_back(n->last_use);
      if (n->plan) plan_ticks.push_back(n->last_use);
      for (const auto& c : n->children) stack.push_back(c.get());
    }
  }
  // The tick below which dropping everything leaves at most 7/8 of the cap (some room
  // before the next eviction, so a scan is paid once per cap/8 new entries at most).
  auto cut = [](std::vector<uint64_t>& ticks, int64_t cap) -> uint64_t {
    const int64_t n = static_cast<int64_t>(ticks.size());
    if (n <= cap) return 0;
    const auto k = static_cast<size_t>(n - (cap - cap / 8));
    std::nth_element(ticks.begin(), ticks.begin() + static_cast<std::ptrdiff_t>(k - 1),
                     ticks.end());
    return ticks[k - 1] + 1;
  };
  // Never the walk that just ended (stamped tick_): its trace may have just compiled.
  const uint64_t threshold =
      std::min(std::max(cut(node_ticks, op_cap), cut(plan_ticks, plan_cap)), tick_);
  if (threshold == 0) return;

  std::vector<const CompiledTrace*> dropped_plans;
  int64_t dropped_nodes = 0;
  // Counts (and lists the plans of) a subtree that goes.
  auto drop = [&](const TraceNode& top) {
    int plans = 0;
    stack.push_back(&top);
    while (!stack.empty()) {
      const TraceNode* n = stack.back();
      stack.pop_back();
      ++dropped_nodes;
      if (n->plan) {
        dropped_plans.push_back(n->plan.get());
        ++plans;
      }
      for (const auto& c : n->children) stack.push_back(c.get());
    }
    return plans;
  };
  // Removes the children of n older than the threshold; returns the plans removed under n.
  // A node is never newer than its parent, so what stays is a tree again.
  std::function<int(TraceNode&)> prune = [&](TraceNode& n) {
    int plans = 0;
    for (auto it = n.children.begin(); it != n.children.end();) {
      if ((*it)->last_use < threshold) {
        plans += drop(**it);
        it = n.children.erase(it);
      } else {
        plans += prune(**it);
        ++it;
      }
    }
    n.plans_below -= plans;
    return plans;
  };
  std::erase_if(anchors_, [&](const std::unique_ptr<Anchor>& a) {
    if (a->root.last_use < threshold) {
      drop(a->root);
      return true;
    }
    prune(a->root);
    return false;
  });
  std::sort(dropped_plans.begin(), dropped_plans.end());
  std::erase_if(compiled_, [&](const std::shared_ptr<CompiledTrace>& p) {
    return std::binary_search(dropped_plans.begin(), dropped_plans.end(), p.get());
  });
  nodes_ -= dropped_nodes;
  evicted_ops_ += dropped_nodes;
  evicted_traces_ += static_cast<int64_t>(dropped_plans.size());
  log_line(kLogTrace, detail::cat("evicted the least recently used traces: ", dropped_plans.size(),
                                  " compiled, ", dropped_nodes, " recorded op(s); keeping ",
                                  compiled_.size(), " compiled (KILN_MAX_TRACES=", plan_cap, "), ",
                                  nodes_, " op(s) (KILN_TRACE_CACHE_OPS=", op_cap, ")"));
}

ExplainReport TraceRecorder::explain() const {
  ExplainReport r;
  for (const auto& plan : compiled_) {
    TraceReport t;
    t.id = plan->id;
    t.generation = plan->generation;
    t.site = plan->site.str();
    for (const TraceOp& op : plan->program.ops) t.ops.push_back(op_name(op.op));
    for (const TensorGuard& g : plan->guards) t.guards.push_back(g.str());
    t.kernels = plan->executable->kernel_count();
    t.backend = plan->executable->backend_name();
    t.notes = plan->executable->notes();
    t.replays = plan->replays;
    t.side_exits = plan->side_exits;
    t.compile_ms = plan->compile_ms;
    r.compile_ms += plan->compile_ms;
    r.traces.push_back(std::move(t));
  }
  for (const BreakStats& b : breaks_) {
    BreakReport br;
    br.reason = b.reason;
    br.site = b.site.str();
    br.file = b.site.file;
    br.line = b.site.line;
    br.function = b.site.function;
    br.count = b.count;
    br.eager_ms = b.eager_ns / 1e6;
    br.eager_ops = b.eager_ops;
    br.est_saving_ms = estimate_saving_ms(br.eager_ms, b.eager_ops, replay_ns_per_op());
    r.breaks.push_back(std::move(br));
  }
  std::stable_sort(
      r.breaks.begin(), r.breaks.end(),
      [](const BreakReport& a, const BreakReport& b) { return a.eager_ms > b.eager_ms; });
  r.recompiles = recompiles_;
  r.eager_anchors = eager_anchors_;
  r.ops_recorded = ops_recorded_;
  r.ops_replayed = ops_replayed_;
  r.evicted_traces = evicted_traces_;
  r.evicted_ops = evicted_ops_;
  r.replay_ns_per_op = replay_ns_per_op();
  return r;
}

}  // namespace kiln::tracer
