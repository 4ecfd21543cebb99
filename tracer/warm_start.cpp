#include "tracer/warm_start.h"

#include <algorithm>

#include "runtime/error.h"
#include "tracer/background_compile.h"
#include "tracer/config.h"
#include "tracer/persist.h"
#include "tracer/statistics.h"

namespace kiln::tracer {
namespace {

// Said whatever KILN_LOGS asks for: a refused file is something the user must hear of.
void warn(const std::string& line) {
  std::fprintf(config().log_file, "[kiln] warm start: %s\n", line.c_str());
  std::fflush(config().log_file);
}

// Puts a stored path under the anchor; returns its end node (nodes new to the tree are
// counted and marked site_unknown).
TraceNode* put_path(TraceTree& tree, Anchor& anchor, const TraceProgram& program) {
  TraceNode* node = &anchor.root;
  for (const TraceOp& op : program.ops) {
    TraceNode* child = node->find_child(op);
    if (!child) {
      child = node->add_child(op);
      child->site_unknown = true;
      ++tree.nodes;
    }
    node = child;
  }
  return node;
}

}  // namespace

bool WarmStart::on() { return config().warm_start && trace_store() != nullptr; }

void WarmStart::load(TraceTree& tree, Anchor& anchor, TraceStatistics& statistics) {
  const UserSite& site = anchor.lifecycle.site();
  anchor.stored_key = anchor_key(anchor.first, site);
  if (anchor.stored_key.empty()) return;
  anchor.stored_site = site_key_hash(site);
  TraceStore& store = *trace_store();
  if (!store.has_site(anchor.stored_site)) return;
  // At most half the recompile limit's variants, the newest first: stale variants (of
  // shapes or programs gone) must not use up the penalties the running program needs.
  const int most = std::max(1, config().recompile_limit / 2);
  int installed = 0;
  for (const std::string& payload : store.load(anchor.stored_site, anchor.stored_key)) {
    if (anchor.lifecycle.stays_eager() || installed >= most) break;
    StoredTrace stored;
    std::string why;
    if (!decode_stored_trace(payload, &stored, &why)) {
      ++statistics.stored_refused;
      warn(detail::cat("refused a stored trace at ", site.str(), ": ", why,
                       "; the trace records and compiles again"));
      continue;
    }
    // A hash collision of two keys, or a first op with other wiring: not this anchor's.
    if (stored.anchor_key != anchor.stored_key || !stored.first.same_wiring(anchor.first) ||
        !home_device(stored.program).is_cpu())
      continue;
    TraceNode* end = put_path(tree, anchor, stored.program);
    if (end->compiled || end->compile_failed) continue;
    CompileResult result = compile_program(stored.program);
    ++statistics.stored_loaded;
    ++installed;
    install_stored_trace(tree, anchor, *end, std::move(stored.program), std::move(result),
                         statistics);
  }
}

bool WarmStart::is_stored_head(SiteId site) {
  if (site == 0 || trace_store()->empty()) return false;
  auto it = head_sites_.find(site);
  if (it == head_sites_.end()) {
    const UserSite described = current_site();
    const bool stored =
        !described.stable_key().empty() && trace_store()->has_site(site_key_hash(described));
    it = head_sites_.emplace(site, stored).first;
  }
  if (!it->second) return false;
  it->second = false;  // the first time only
  return true;
}

void WarmStart::save(const Anchor& anchor, const CompiledTrace& compiled) {
  if (!on() || anchor.stored_key.empty() || !home_device(compiled.program).is_cpu()) return;
  StoredTrace stored;
  stored.anchor_key = anchor.stored_key;
  stored.first = anchor.first;
  stored.first.site = 0;
  stored.program = compiled.program;
  for (TraceOp& op : stored.program.ops) op.site = 0;
  trace_store()->save(anchor.stored_site, anchor.stored_key, program_hash(stored.program),
                      encode_stored_trace(stored));
}

}  // namespace kiln::tracer
