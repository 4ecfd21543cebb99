#include "tracer/tracer.h"

#include <algorithm>
#include <optional>

#include "ops/autograd/record.h"
#include "runtime/error.h"
#include "tracer/api.h"
#include "tracer/config.h"
#include "tracer/eviction.h"
#include "tracer/lifecycle.h"
#include "tracer/profiler.h"
#include "tracer/replay.h"
#include "tracer/side_exit.h"
#include "tracer/symbolic_shapes.h"

namespace kiln::tracer {
namespace {

DispatchHook* make_hook() { return &Tracer::current(); }
bool same_meta(const OutputMeta& a, const OutputMeta& b) {
  return a.offset == b.offset && a.dtype == b.dtype && a.device == b.device && a.sizes == b.sizes &&
         a.strides == b.strides;
}
void flush_hook() { Tracer::current().flush(); }
// The runtime's host reads (item(), printing, to_vector()) and data-dependent shapes
// (nonzero): `what` is the detail.
bool sync_hook(lazy::SyncKind kind, const char* what, const SourceSite& site,
               const TensorImpl* read) {
  if (kind == lazy::SyncKind::DataDependentShape) {
    Tracer::current().on_sync(BreakCause{BreakReason::DataDependentShape, what}, site);
    return false;
  }
  return Tracer::current().on_host_read(BreakCause{BreakReason::HostRead, what}, site, read);
}

struct Registration {
  Registration() {
    set_dispatch_hook_factory(make_hook);
    lazy::set_hooks(flush_hook, sync_hook);
  }
} registration;

}  // namespace

Tracer::Tracer() : enabled_(config().auto_trace) {}
// Compiles this tracer's anchors wait for are abandoned (skipped if queued) and the one
// running is waited for: the thread (for the main thread, exit()) goes on only once no
// compile of its traces runs (background_compile.h).
Tracer::~Tracer() {
  for (const auto& a : tree_.anchors)
    if (a->pending) a->pending->abandon();
  if (submitted_compiles_on_this_thread()) wait_for_running_compile();
}

void Tracer::wait_for_compiles() {
  for (const auto& a : tree_.anchors) {
    if (walk_.active() && walk_.anchor == a.get()) {
      if (a->pending) a->pending->wait();  // installed when its next walk begins
      continue;
    }
    take_finished_compile(tree_, *a, statistics_, true);
  }
}

int Tracer::compiles_in_flight() const {
  int n = 0;
  for (const auto& a : tree_.anchors) n += a->pending && !a->pending->done();
  return n;
}

Tracer& Tracer::current() {
  thread_local Tracer tracer;
  return tracer;
}

bool Tracer::on_call(const OpCall& call, const OutputMeta& meta, Tensor* result) {
  if (!active() || walk_.in_boundary) return false;
  return handle(call, meta, nullptr, result);
}

bool Tracer::on_known_call(const OpCall& call, Tensor* result, const OutputMeta** meta) {
  // As handle's fast path, for the calls whose metadata the path's node holds: a
  // non-symbolic path (a symbolic one's nodes hold another size's), not a copy across
  // devices (on_call handles copies to the host). Every input defined: validation would
  // pass, as it did when the op was recorded on inputs like these. A view's offset
  // follows its input's, which guards leave open: a view only of a walk value with its
  // node's metadata, matching a node recorded on such a value (the same input metadata
  // then and now, so the same inferred view). A host-side op is left to handle, which
  // asks about it first as here (it runs eagerly, outside the walk).
  if (walk_.mode != WalkMode::Replay || walk_.in_boundary || walk_.anchor->symbolic || !active())
    return false;
  const OpFamily family = call.info().family;
  if (family == OpFamily::ToDevice) return false;
  const bool view = family == OpFamily::View;
  if (view && !walk_.single_exact_input(call)) return false;
  for (const Tensor& in : call.inputs)
    if (!in.defined()) return false;
  if (!host_sites_.empty() && runs_on_host_side(call)) return false;
  std::vector<Tensor> new_externals;
  for (const auto& c : walk_.node->children) {
    if (c->compiled_below > 0 && walk_.match(c->op, call, nullptr, &new_externals)) {
      if (view && !c->view_of_exact) return false;  // handle infers it
      *meta = &c->op.meta;
      *result = replay_op(call, c->op.meta, nullptr, c.get(), new_externals);
      return true;
    }
  }
  return false;
}

bool Tracer::on_call_into(const OpCall& call, const OutputMeta& meta, const Tensor& out) {
  if (!active() || walk_.in_boundary) return false;
  return handle(call, meta, &out, nullptr);
}

bool Tracer::loops_allowed() const {
  return regions_.empty() && autograd::tls_library_loop_depth == 0;
}

bool Tracer::handle(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                    Tensor* result) {
  if (!host_sites_.empty() && !target && runs_on_host_side(call)) {
    lazy::PendingPause independent(true);  // its inputs owe nothing to the walk
    *result = execute(call, meta);
    ++statistics_.host_side_ops;
    note_host_value(*result);
    return true;
  }
  if (call.op == OpId::ToDevice && meta.device.is_cpu() && !call.inputs[0].device().is_cpu()) {
    on_sync(BreakCause{BreakReason::CopyToHost, "a copy to the host (.cpu() / .to(\"cpu\"))"},
            SourceSite{});
    return false;  // runs eagerly, outside any trace
  }
  if (walk_.mode == WalkMode::EagerSingle) {
    const TraceOp& first = walk_.anchor->first;
    if (call.op == first.op && call.inputs.size() == first.inputs.size() &&
        call.attrs == first.attrs)
      return false;  // the same op again: it runs eagerly, as it is hot and alone
    end_walk(Boundary::Loop, nullptr, {});
  }
  std::vector<Tensor> new_externals;
  if (walk_.mode == WalkMode::Replay) {  // fast path: the call is the next op of the path
    for (const auto& c : walk_.node->children) {
      if (c->compiled_below > 0 && walk_.match(c->op, call, target, &new_externals)) {
        Tensor value = replay_op(call, meta, target, c.get(), new_externals);
        if (result) *result = value;
        return true;
      }
    }
    new_externals.clear();
  }
  // The op as described against the walk: `op`, or the fresh description closes_loop made
  // when a loop closed (used in place: a TraceOp is costly to move).
  TraceOp op;
  Walk::Fresh fresh;
  TraceOp* described = &op;
  const SiteId site = current_op_site();
  if (walk_.mode == WalkMode::Idle) {
    walk_.describe_into(&op, call, meta, target, &new_externals, true);
    op.site = site;
    if (!target && is_varying_view(op, tree_.anchors)) {
      host_sites_.insert(site);  // from now on a host-side op (runs_on_host_side)
      log_line(kLogTrace, detail::cat(op_name(op.op), " at ", current_site().str_exact(),
                                      " takes new bounds each time: it runs outside traces, "
                                      "its view an input of the next"));
      lazy::PendingPause independent(true);
      *result = execute(call, meta);
      ++statistics_.host_side_ops;
      note_host_value(*result);
      return true;
    }
    begin_walk(op, 0);
  } else {
    walk_.describe_into(&op, call, meta, target, &new_externals, false);
    op.site = site;
    TraceNode* child = walk_.mode == WalkMode::Replay ? walk_.node->find_child(op) : nullptr;
    const bool continues = child && child->compiled_below > 0;
    LoopClose close = continues
                          ? LoopClose::No
                          : walk_.closes_loop(call, meta, target, op, loops_allowed(), &fresh);
    // A suspended head (a false one, or a short loop unrolled) closes nothing.
    const uint64_t key = close != LoopClose::No ? penalty_key(op) : 0;
    if (key != 0) {
      auto it = head_penalties_.find(key);
      if (it != head_penalties_.end() && it->second.suspended(tree_.tick)) {
        close = LoopClose::No;
        passed_suspended_head_ = key;
        passed_suspended_tick_ = tree_.tick;
      }
    }
    if (close == LoopClose::AtHead && helper_suspended(op.op)) close = LoopClose::No;
    if (close != LoopClose::No) {
      const bool round = close == LoopClose::AtAnchor;
      if (round && walk_is_round_ && loop_rounds_.anchor == walk_.anchor) {
        ++loop_rounds_.rounds;
        loop_rounds_.ops += walk_.node->depth;
      } else if (round) {
        loop_rounds_ = LoopRounds{walk_.anchor, 1, walk_.node->depth};
      }
      // A head found by place (the same op at the same site on other externals: maybe a
      // layer called again), not by the very same inputs coming round (fresh unset).
      // (Without a site there is no penalty to judge a head: no provisional rounds.)
      const bool guessed = close == LoopClose::AtHead && fresh.set && key != 0;
      const bool provisional =
          guessed || (walk_.anchor->head_guessed && loop_rounds_.ops <= config().max_trace_length);
      end_walk(Boundary::Loop, nullptr, {}, provisional);
      new_externals.clear();
      if (fresh.set) {
        // closes_loop described it fresh: its inputs are all external to the ended walk
        // (none of its values), so ending it changed nothing the description reads.
        described = &fresh.op;
        new_externals = std::move(fresh.externals);
      } else {
        // Described again now that the ended walk's values exist (they may have been lazy).
        op = walk_.describe(call, meta, target, &new_externals, true);
        op.site = site;
      }
      begin_walk(*described, close == LoopClose::AtHead ? key : 0, round);
      // (A head a compiled trace already starts at stays what it was.)
      if (close == LoopClose::AtHead && walk_.anchor->lifecycle.compiles() == 0)
        walk_.anchor->head_guessed = guessed;
    } else if (!continues && walk_.mode == WalkMode::Record && !walk_.at_root() &&
               loops_allowed() && WarmStart::on() && warm_.is_stored_head(site)) {
      // A stored trace is anchored here (warm_start.h): the walk from the setup code ends
      // before it, as at a loop head, so the loop's first iteration replays.
      end_walk(Boundary::Loop, nullptr, {});
      new_externals.clear();
      op = walk_.describe(call, meta, target, &new_externals, true);
      op.site = site;
      begin_walk(op, 0);
    }
    if (walk_.active() && walk_.node->depth >= config().max_trace_length) {
      if (passed_suspended_head_ != 0 && passed_suspended_tick_ == tree_.tick) {
        // Through a suspended head to the length limit, no host read: a loop head again.
        head_penalties_[passed_suspended_head_].lift();
        passed_suspended_head_ = 0;
        log_line(kLogTrace, detail::cat("a walk through a suspended loop head reached ",
                                        config().max_trace_length,
                                        " ops without a host read: the head is a loop head "
                                        "again"));
      }
      const BreakCause too_long{BreakReason::TraceTooLong,
                                std::to_string(config().max_trace_length)};
      end_walk(Boundary::Break, &too_long, current_site());
      new_externals.clear();
      op = walk_.describe(call, meta, target, &new_externals, true);
      op.site = site;
      described = &op;
      begin_walk(op, 0);
    }
  }

  if (walk_.mode == WalkMode::Eager || walk_.mode == WalkMode::EagerSingle) return false;
  if (walk_.mode == WalkMode::Replay) {
    TraceNode* child = walk_.node->find_child(*described);
    if (child && child->compiled_below > 0) {
      Tensor value = replay_op(call, meta, target, child, new_externals);
      if (result) *result = value;
      return true;
    }
    // A symbolic path passes by relations between sizes, not by equal guards (the first
    // op of a walk comes here, not through the fast path above).
    if (walk_.anchor->symbolic) {
      std::vector<Tensor> matched;
      for (const auto& c : walk_.node->children) {
        if (c->compiled_below > 0 && walk_.match(c->op, call, target, &matched)) {
          Tensor value = replay_op(call, meta, target, c.get(), matched);
          if (result) *result = value;
          return true;
        }
      }
    }
    side_exit(walk_, divergence(*described));
  }
  Tensor value = record_op(call, meta, target, *described, new_externals);
  if (result) *result = value;
  return true;
}

Tensor Tracer::replay_op(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                         TraceNode* child, std::vector<Tensor>& new_externals) {
  if (child->site_unknown) {  // put back from the warm-start store
    child->op.site = current_op_site();
    child->site_unknown = false;
  }
  // (Only an op on external inputs alone can be a head: loops_allowed() is asked then.)
  if (Walk::all_inputs_external(child->op))
    walk_.note_replayed_head(call, target, child->op, loops_allowed());
  // An in-place op's write into *target waits for the compiled trace too: a read of any
  // memory before then (a host write into an input it reads) must run it first.
  if (target) lazy::tls_pending = true;
  Tensor value = target ? *target : walk_.make_lazy(meta);
  if (walk_.anchor->symbolic) walk_.metas.push_back(meta);
  walk_.commit(child, call, new_externals, value,
               !target && (&meta == &child->op.meta || same_meta(meta, child->op.meta)));
  ++statistics_.ops_replayed;
  if (walk_.partial || walk_.partial_probe > 0) {
    try {
      WalkBoundaryScope boundary(walk_.in_boundary);
      advance_partial(walk_);
    } catch (...) {
      fail_pending_values(walk_, std::current_exception());
      walk_.clear();
      throw;
    }
  }
  return value;
}

Tensor Tracer::record_op(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                         const TraceOp& op, std::vector<Tensor>& new_externals) {
  const int64_t start = trace_clock_ns();
  Tensor value;
  if (target) {
    execute_into(call, meta, *target);
    value = *target;
  } else {
    value = execute(call, meta);
  }
  walk_.eager_ns += trace_clock_ns() - start;
  TraceNode* child = walk_.node->find_child(op);
  if (!child) {
    const bool view_of_exact =
        !target && call.info().family == OpFamily::View && walk_.single_exact_input(call);
    child = walk_.node->add_child(op);
    child->view_of_exact = view_of_exact;
    ++tree_.nodes;
  } else if (child->site_unknown) {  // put back from the warm-start store
    child->op.site = op.site;
    child->site_unknown = false;
  }
  // Under a symbolic anchor a recorded node is shared by every size its symbolic prefix
  // passes (find_child ignores metadata): its meta is the first recording's, so the walk
  // keeps this op's own, as for a replayed op (Walk::metas).
  if (walk_.anchor->symbolic) walk_.metas.push_back(meta);
  walk_.commit(child, call, new_externals, value, !target && same_meta(meta, child->op.meta));
  ++statistics_.ops_recorded;
  return value;
}

BreakCause Tracer::divergence(const TraceOp& op) const {
  // The guard of a compiled path first (recorded paths of other sizes hang beside it).
  for (int compiled = 1; compiled >= 0; --compiled) {
    for (const auto& c : walk_.node->children) {
      if ((c->compiled_below > 0) != (compiled == 1)) continue;
      std::string diff = bounds_diff(c->op, op, walk_.index_values);
      if (diff.empty()) diff = c->op.guard_diff(op, &walk_.symbol_values);
      if (!diff.empty()) return BreakCause{BreakReason::GuardFailed, std::move(diff)};
    }
  }
  return BreakCause{BreakReason::Diverged,
                    detail::cat("op ", walk_.node->depth + 1, ": expected ",
                                walk_.node->children.empty()
                                    ? std::string("the trace to end")
                                    : std::string(op_name(walk_.node->children[0]->op.op)),
                                ", got ", op_name(op.op))};
}

int Tracer::warmup_for_new_anchor() const {
  for (auto it = regions_.rbegin(); it != regions_.rend(); ++it)
    if (it->warmup >= 1) return it->warmup;
  return config().warmup;
}

uint64_t Tracer::helper_key(const UserSite& site, OpId op) {
  if (site.helper.empty()) return 0;  // the user's own op
  uint64_t h = 0xcbf29ce484222325ULL ^ static_cast<uint64_t>(op);
  auto mix = [&](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL; };
  for (size_t f = 0; f < site.key.size(); ++f) {
    if (site.key[f].file.rfind("kiln/", 0) != 0) continue;  // the helpers' frames only
    for (char c : site.key[f].file) mix(static_cast<unsigned char>(c));
    for (char c : site.key[f].qualname) mix(static_cast<unsigned char>(c));
    mix(static_cast<uint64_t>(site.key[f].offset));
    mix(site.key[f].code_hash);
  }
  return h ? h : 1;
}

bool Tracer::helper_suspended(OpId op) const {
  if (helper_penalties_.empty()) return false;
  const uint64_t key = helper_key(current_site(), op);
  auto it = helper_penalties_.find(key);
  return it != helper_penalties_.end() && it->second.suspended(tree_.tick);
}

uint64_t Tracer::penalty_key(const TraceOp& op) {
  if (op.site == 0) return 0;  // no site (C++ without a SiteScope): no penalties
  const uint64_t key = op.site ^ (static_cast<uint64_t>(op.op) * 0x9e3779b97f4a7c15ULL);
  return key ? key : 1;
}

void Tracer::begin_walk(const TraceOp& first, uint64_t head_key, bool round) {
  walk_is_round_ = round;
  if (!round) loop_rounds_ = LoopRounds{};
  Anchor* anchor = tree_.find_anchor(first);
  // The same place in the same user function reached through another caller (a training
  // step called from a warmup loop and then from the timed loop): the anchor it has.
  const SiteId function_site = !anchor && head_key == 0 && !round ? current_function_site() : 0;
  if (!anchor && function_site != 0) anchor = tree_.find_anchor_in_function(first, function_site);
  if (!anchor) {
    anchor = tree_.add_anchor(first, TraceLifecycle(warmup_for_new_anchor(), current_site()));
    anchor->function_site = function_site;
    if (WarmStart::on()) warm_.load(tree_, *anchor, statistics_);
  }
  if (head_key != 0) anchor->head_key = head_key;
  if (anchor->pending) take_finished_compile(tree_, *anchor, statistics_, false);
  walk_.begin(*anchor, ++tree_.tick);
}

void Tracer::end_walk(Boundary kind, const BreakCause* cause, const UserSite& site,
                      bool provisional) {
  if (!walk_.active()) return;
  if (logging(kLogWalks)) {
    static constexpr const char* kEnds[] = {"a region edge", "the loop coming round", "", ""};
    static constexpr const char* kModes[] = {"idle", "recorded", "replayed", "eager", "eager"};
    log_line(kLogWalks,
             detail::cat("walk from ", op_name(walk_.anchor->first.op), " at ",
                         walk_.anchor->lifecycle.site().str_exact(), ": ", walk_.node->depth,
                         " ops ", kModes[static_cast<int>(walk_.mode)], ", ended by ",
                         cause ? cause->message() : kEnds[static_cast<int>(kind)]));
  }
  WalkBoundaryScope boundary(walk_.in_boundary);
  const bool is_break = kind == Boundary::Break || kind == Boundary::Abort;
  std::optional<profiler::Span> break_span;
  if (is_break && profiler::tls_active) {
    break_span.emplace(profiler::Kind::GraphBreak, Device(DeviceType::CPU), [&] {
      return detail::cat("graph break ", cause->message(), " at ",
                         site.known() ? site.short_file() : "?", ":", site.line);
    });
  }
  const bool eager = walk_.mode == WalkMode::Eager || walk_.mode == WalkMode::EagerSingle;
  bool replayed = false;
  // The trace that ran (a symbolic one: bound; none for a speed trial's eager turn that
  // ran the walk's own program).
  std::shared_ptr<const CompiledTrace> ran;
  try {
    if (walk_.mode == WalkMode::Replay && !walk_.at_root()) {
      if (walk_.node->compiled && kind != Boundary::Abort) {
        ran = replay_compiled(walk_, *walk_.node, statistics_);
        replayed = true;
      } else {
        materialize(walk_, static_cast<size_t>(walk_.node->depth));
      }
    }
  } catch (...) {
    fail_pending_values(walk_, std::current_exception());
    walk_.clear();
    throw;
  }
  lazy::tls_pending = false;
  // Any other end of a walk inside the outermost region cuts its walk in two.
  if (kind != Boundary::Region || (!keep_region_plan_ && !regions_.empty())) region_clean_ = false;
  if (keep_region_plan_ && replayed && ran && region_clean_ &&
      statistics_.host_side_ops + statistics_.independent_reads == region_side_ops_ &&
      launchable(ran->program)) {
    region_plan_ = RegionPlan{ran, walk_.externals, walk_.scalars, walk_.outputs};
  }
  if (!replayed && !eager && kind != Boundary::Abort && !walk_.at_root())
    on_trace_ended(tree_, *walk_.anchor, *walk_.node, walk_, statistics_, site, provisional);
  const int64_t eager_ns = replayed ? 0 : walk_.eager_ns;
  const int64_t eager_ops = replayed || eager || walk_.at_root() ? 0 : walk_.node->depth;
  walk_.clear();
  if (is_break) {
    statistics_.note_break(*cause, site, eager_ns, eager_ops);
    if (profiler::Event* e = break_span ? break_span->event() : nullptr) {
      e->reason = cause->message();
      e->file = site.file;
      e->line = site.line;
      e->function = site.function;
      e->eager_ns = eager_ns;
      e->ops = static_cast<int>(eager_ops);
    }
  }
  evict_least_recent(tree_, statistics_);
}

bool Tracer::is_varying_view(const TraceOp& first,
                             const std::vector<std::unique_ptr<Anchor>>& anchors) {
  if (first.site == 0 || op_info(first.op).family != OpFamily::View) return false;
  bool other_bounds = false;
  for (const auto& a : anchors) {
    if (a->first.op != first.op || a->first.site != first.site) continue;
    if (a->first.same_place(first)) return false;  // seen with these bounds: an anchor
    other_bounds = true;
  }
  return other_bounds;
}

bool Tracer::runs_on_host_side(const OpCall& call) const {
  for (const Tensor& in : call.inputs)
    if (walk_.depends_on(in.impl())) return false;
  return host_sites_.count(current_op_site()) != 0;
}

void Tracer::note_host_value(const Tensor& value) {
  constexpr size_t kKept = 256;  // host-side values are read soon after they are made
  if (host_values_.size() >= kKept) {
    std::erase_if(host_values_, [](const auto& v) { return v.second.expired(); });
    if (host_values_.size() >= kKept)
      host_values_.erase(host_values_.begin(), host_values_.begin() + kKept / 2);
  }
  host_values_.emplace_back(value.impl(), value.impl_ptr());
}

bool Tracer::is_host_value(const TensorImpl* t) const {
  for (auto it = host_values_.rbegin(); it != host_values_.rend(); ++it)
    if (it->first == t && !it->second.expired()) return true;
  return false;
}

bool Tracer::on_host_read(const BreakCause& cause, const SourceSite& where,
                          const TensorImpl* read) {
  const bool walking = walk_.active() && !walk_.in_boundary &&
                       (walk_.mode == WalkMode::Record || walk_.mode == WalkMode::Replay);
  if (walking && read) {
    if (is_host_value(read) && !walk_.depends_on(read)) {
      ++statistics_.independent_reads;
      return true;
    }
    // An integer value made only from factories, random draws and host-side values (a
    // batch's random indices): its ops become host-side. Not one computed from the
    // trace's inputs, nor a floating one (a loss): that read is the step's boundary.
    const int value = walk_.values.find(read);
    if (value >= 0 && regions_.empty() && !is_floating(read->dtype)) {
      const Walk::Producers from = walk_.producers(value);
      if (std::all_of(from.externals.begin(), from.externals.end(),
                      [&](const TensorImpl* t) { return t && is_host_value(t); }))
        host_sites_.insert(from.sites.begin(), from.sites.end());
    }
  }
  on_sync(cause, where);
  return false;
}

void Tracer::on_sync(const BreakCause& cause, const SourceSite& fallback) {
  check_break_cause(cause, BreakPhase::Sync);
  if (!walk_.active() || walk_.in_boundary) return;
  const UserSite site = current_site(fallback);
  // A walk anchored at a head found mid-walk ran into a host read: a false loop head
  // (unless proven a loop's head, HeadPenalty::lift).
  if (walk_.anchor->head_key != 0 && !head_penalties_[walk_.anchor->head_key].proven()) {
    HeadPenalty& penalty = head_penalties_[walk_.anchor->head_key];
    penalty.penalize(tree_.tick);
    forget_endings(*walk_.anchor);
    const UserSite& head = walk_.anchor->lifecycle.site();
    if (const uint64_t helper = helper_key(head, walk_.anchor->first.op))
      helper_penalties_[helper].penalize(tree_.tick);
    ++statistics_.head_penalties;
    log_line(kLogTrace, detail::cat("loop head at ", walk_.anchor->lifecycle.site().str_exact(),
                                    " ends at a host read: not a loop head for the next ",
                                    penalty.penalty(), " walks"));
  }
  unroll_short_loop();
  end_walk(Boundary::Break, &cause, site);
  for (const RegionOptions& r : regions_) {
    if (r.fullgraph) {
      throw GraphBreakError(detail::cat("[fullgraph] graph break in region '", r.name, "' at ",
                                        site.str(), ": ", cause.message()));
    }
  }
}

void Tracer::unroll_short_loop() {
  const bool short_loop = walk_is_round_ && loop_rounds_.anchor == walk_.anchor &&
                          loop_rounds_.rounds + 1 <= kMaxUnrolledRounds &&
                          loop_rounds_.ops + walk_.node->depth <= config().max_trace_length;
  const uint64_t key = short_loop ? penalty_key(walk_.anchor->first) : 0;
  const int rounds = loop_rounds_.rounds + 1;
  loop_rounds_ = LoopRounds{};
  walk_is_round_ = false;
  if (key == 0) return;
  HeadPenalty& penalty = head_penalties_[key];
  penalty.penalize(tree_.tick);
  forget_endings(*walk_.anchor);  // its rounds were not a loop of the hot path
  ++statistics_.unrolled_loops;
  log_line(kLogTrace,
           detail::cat("loop at ", walk_.anchor->lifecycle.site().str_exact(), " ran ", rounds,
                       " rounds between two host reads: unrolled into one "
                       "trace (not a loop head for the next ",
                       penalty.penalty(), " walks)"));
}

void Tracer::flush() {
  if (!lazy::tls_pending || walk_.in_boundary) return;
  if (walk_.mode == WalkMode::Replay) side_exit(walk_, BreakCause{BreakReason::PendingRead, ""});
  lazy::tls_pending = false;
}

void Tracer::region_enter(const RegionOptions& options, const CapturedSite& site) {
  end_walk(Boundary::Region, nullptr, {});
  region_clean_ = regions_.empty();  // a nested region's entry ends the outer one's walk
  region_side_ops_ = statistics_.host_side_ops + statistics_.independent_reads;
  regions_.push_back(options);
  region_sites_.push_back(site);
}

void Tracer::region_exit(bool by_exception) {
  // The region ends even when ending its walk throws (pending work that runs out of
  // memory): a region left open would keep every later op of this thread in region mode.
  struct Pop {
    Tracer& t;
    ~Pop() {
      if (!t.regions_.empty()) {
        t.regions_.pop_back();
        t.region_sites_.pop_back();
      }
    }
  } pop{*this};
  if (by_exception) {
    const BreakCause cause{BreakReason::UserException, ""};
    check_break_cause(cause, BreakPhase::Record);
    end_walk(Boundary::Abort, &cause,
             region_sites_.empty() ? UserSite{} : region_sites_.back().describe());
  } else {
    keep_region_plan_ = plans_wanted_ && regions_.size() == 1;
    region_plan_ = RegionPlan{};
    struct Done {
      bool& flag;
      ~Done() { flag = false; }
    } done{keep_region_plan_};
    end_walk(Boundary::Region, nullptr, {});
  }
}

RegionPlan Tracer::take_region_plan() {
  RegionPlan plan = std::move(region_plan_);
  region_plan_ = RegionPlan{};
  return plan;
}

void Tracer::set_enabled(bool on) {
  if (!on) end_walk(Boundary::Region, nullptr, {});
  enabled_ = on;
}

void Tracer::reset() {
  end_walk(Boundary::Region, nullptr, {});
  for (const auto& a : tree_.anchors)
    if (a->pending) a->pending->abandon();  // dropped with the tree; skipped if queued
  tree_ = TraceTree{};
  statistics_ = TraceStatistics{};
  head_penalties_.clear();
  helper_penalties_.clear();
  loop_rounds_ = LoopRounds{};
  walk_is_round_ = false;
  host_sites_.clear();
  host_values_.clear();
  warm_.reset();
}

}  // namespace kiln::tracer
