#include "tracer/symbolic_shapes.h"

#include <algorithm>
#include <tuple>

#include "runtime/error.h"
#include "tracer/compiled_trace.h"

namespace kiln::tracer {
namespace {

std::vector<const TensorGuard*> guards_of(const TraceProgram& p) {
  std::vector<const TensorGuard*> guards;
  for (const TraceOp& op : p.ops)
    for (const TensorGuard& g : op.new_guards) guards.push_back(&g);
  return guards;
}

int16_t symbol_at(const TensorGuard& g, size_t d) {
  return d < g.symbols.size() ? g.symbols[d] : static_cast<int16_t>(-1);
}

}  // namespace

bool same_but_sizes(const TraceProgram& a, const TraceProgram& b) {
  if (a.ops.size() != b.ops.size() || a.num_externals != b.num_externals) return false;
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const TraceOp& x = a.ops[i];
    const TraceOp& y = b.ops[i];
    if (!same_but_bounds(x, y)) return false;
    for (size_t k = 0; k < x.new_guards.size(); ++k) {
      const TensorGuard& g = x.new_guards[k];
      const TensorGuard& h = y.new_guards[k];
      if (g.dtype != h.dtype || g.device != h.device || g.sizes.size() != h.sizes.size() ||
          g.alias_of != h.alias_of)
        return false;
    }
  }
  return true;
}

std::optional<Generalized> generalize(const TraceProgram& seen, const TraceProgram& now,
                                      GeneralizeFailure* failure) {
  auto fail = [&](GeneralizeFailure why) {
    if (failure) *failure = why;
    return std::nullopt;
  };
  if (!same_but_sizes(seen, now)) return fail(GeneralizeFailure::Structure);
  const std::vector<const TensorGuard*> a = guards_of(seen), b = guards_of(now);
  // A symbol is keyed by (seen's symbol or -1, seen's size, now's size): dims that moved
  // together share it. A dim symbolic in `seen` keeps its symbol unless its dims now
  // disagree (then they split).
  std::map<std::tuple<int, int64_t, int64_t>, int16_t> symbols;
  Generalized out;
  bool any = false;
  for (size_t k = 0; k < b.size(); ++k) {
    const TensorGuard& g = *a[k];
    TensorGuard h = *b[k];
    h.symbols.clear();
    h.derived_strides = 0;
    const size_t rank = h.sizes.size();
    boost::container::small_vector<int16_t, 4> syms(rank, -1);
    bool symbolic = false;
    for (size_t d = 0; d < rank; ++d) {
      const int16_t was = symbol_at(g, d);
      if (was < 0 && g.sizes[d] == h.sizes[d]) continue;
      if (h.sizes[d] < 2 || (was < 0 && g.sizes[d] < 2)) return fail(GeneralizeFailure::ZeroOrOne);
      const auto key = std::make_tuple(static_cast<int>(was), was < 0 ? g.sizes[d] : 0, h.sizes[d]);
      auto it = symbols.find(key);
      if (it == symbols.end()) {
        KILN_CHECK(symbols.size() < 32000, Error, "[trace] too many symbolic sizes");
        it = symbols.emplace(key, static_cast<int16_t>(symbols.size())).first;
      }
      syms[d] = it->second;
      symbolic = true;
    }
    if (symbolic) {
      const Dims ca = contiguous_strides(g.sizes), cb = contiguous_strides(h.sizes);
      for (size_t d = 0; d < rank; ++d) {
        const bool was_derived = (g.derived_strides >> d) & 1u;
        if (was_derived || g.strides[d] != h.strides[d]) {
          const bool follows = h.strides[d] == cb[d] && (was_derived || g.strides[d] == ca[d]);
          if (!follows || d >= 32) return fail(GeneralizeFailure::Strides);
          h.derived_strides |= 1u << d;
        }
      }
      h.symbols = syms;
      any = true;
    } else if (g.strides != h.strides) {
      return fail(GeneralizeFailure::Strides);
    }
    out.guards.push_back(std::move(h));
  }
  GeneralizeFailure bounds_failure = GeneralizeFailure::Structure;
  if (!generalize_bounds(seen, now, out, &bounds_failure)) return fail(bounds_failure);
  if (!any && out.index_symbols == 0) return fail(GeneralizeFailure::NothingDiffers);
  out.symbols = static_cast<int>(symbols.size());
  return out;
}

std::string describe_symbols(const TraceProgram& program) {
  std::vector<std::string> lines(static_cast<size_t>(symbol_count(program)));
  std::vector<int64_t> at = symbol_values_of(program);
  int slot = 0;
  for (const TraceOp& op : program.ops) {
    for (const TensorGuard& g : op.new_guards) {
      for (size_t d = 0; d < g.symbols.size(); ++d) {
        const int16_t s = g.symbols[d];
        if (s < 0) continue;
        lines[s] += (lines[s].empty() ? detail::cat("s", s, " = ") : std::string(" = ")) +
                    detail::cat("dim ", d, " of in", slot);
      }
      ++slot;
    }
  }
  std::string out;
  for (size_t s = 0; s < lines.size(); ++s)
    out += (s ? "; " : "") + lines[s] + detail::cat(" (compiled at ", at[s], ")");
  const std::string bounds = describe_bounds(program);
  return out.empty() || bounds.empty() ? out + bounds : out + "; " + bounds;
}

bool subsumes(const TraceProgram& general, const TraceProgram& specific) {
  if (!same_but_sizes(general, specific)) return false;
  const std::vector<const TensorGuard*> a = guards_of(general), b = guards_of(specific);
  for (size_t k = 0; k < a.size(); ++k) {
    const TensorGuard& g = *a[k];
    const TensorGuard& h = *b[k];
    for (size_t d = 0; d < g.sizes.size(); ++d) {
      const int16_t sg = symbol_at(g, d), sh = symbol_at(h, d);
      if (sg < 0 && (sh >= 0 || g.sizes[d] != h.sizes[d])) return false;
      if (sg >= 0 && sh < 0 && h.sizes[d] < 2) return false;
      const bool dg = (g.derived_strides >> d) & 1u, dh = (h.derived_strides >> d) & 1u;
      if (!dg && (dh || g.strides[d] != h.strides[d])) return false;
      if (dg && !dh && h.strides[d] != contiguous_strides(h.sizes)[d]) return false;
    }
  }
  return subsumes_bounds(general, specific);
}

std::string symbolic_diff(const TensorGuard& g, const TensorGuard& actual,
                          const std::vector<int64_t>& values) {
  if (g.sizes.size() != actual.sizes.size()) return "";
  for (size_t d = 0; d < g.sizes.size(); ++d) {
    const int16_t s = symbol_at(g, d);
    if (s < 0 || static_cast<size_t>(s) >= values.size() || values[s] == 0) continue;
    if (values[s] != actual.sizes[d])
      return detail::cat("dim ", d, " is s", s, ", ", values[s], " earlier in this walk, got ",
                         actual.sizes[d], " (shape ", dims_str(actual.sizes), ")");
  }
  return "";
}

void set_guards(TraceProgram& program, const std::vector<TensorGuard>& guards) {
  size_t k = 0;
  for (TraceOp& op : program.ops)
    for (TensorGuard& g : op.new_guards) g = guards.at(k++);
}

bool is_symbolic(const TraceProgram& program) {
  for (const TraceOp& op : program.ops) {
    if (op.bounds.any()) return true;
    for (const TensorGuard& g : op.new_guards)
      if (g.symbolic()) return true;
  }
  return false;
}

int symbol_count(const TraceProgram& program) {
  int n = 0;
  for (const TraceOp& op : program.ops)
    for (const TensorGuard& g : op.new_guards)
      for (int16_t s : g.symbols) n = std::max(n, s + 1);
  return n;
}

std::vector<int64_t> symbol_values_of(const TraceProgram& program) {
  std::vector<int64_t> values(static_cast<size_t>(symbol_count(program)), 0);
  for (const TraceOp& op : program.ops)
    for (const TensorGuard& g : op.new_guards)
      for (size_t d = 0; d < g.symbols.size(); ++d)
        if (g.symbols[d] >= 0) values[g.symbols[d]] = g.sizes[d];
  return values;
}

bool match_symbolic_sizes(const TensorGuard& g, const Tensor& t, std::vector<int64_t>& values,
                          std::vector<int16_t>& bound) {
  const Dims& sizes = t.sizes();
  const Dims& strides = t.strides();
  if (sizes.size() != g.sizes.size()) return false;
  const size_t rank = sizes.size();
  for (size_t d = 0; d < rank; ++d) {
    const int16_t s = symbol_at(g, d);
    if (s < 0) {
      if (sizes[d] != g.sizes[d]) return false;
      continue;
    }
    if (sizes[d] < 2) return false;
    if (values.size() <= static_cast<size_t>(s)) values.resize(static_cast<size_t>(s) + 1, 0);
    if (values[s] == 0) {
      values[s] = sizes[d];
      bound.push_back(s);
    } else if (values[s] != sizes[d]) {
      return false;
    }
  }
  int64_t inner = 1;  // the contiguous stride at d
  for (size_t d = rank; d-- > 0;) {
    const bool derived = (g.derived_strides >> d) & 1u;
    if (strides[d] != (derived ? inner : g.strides[d])) return false;
    inner *= sizes[d] > 0 ? sizes[d] : 1;
  }
  return true;
}

std::shared_ptr<const CompiledTrace> SizeBindings::find(const std::vector<int64_t>& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  it->second.last_use = ++clock_;
  return it->second.trace;
}

void SizeBindings::add(const std::vector<int64_t>& key,
                       std::shared_ptr<const CompiledTrace> bound) {
  if (entries_.size() >= kMost) {
    auto oldest = std::min_element(
        entries_.begin(), entries_.end(),
        [](const auto& x, const auto& y) { return x.second.last_use < y.second.last_use; });
    entries_.erase(oldest);
  }
  entries_[key] = Entry{std::move(bound), ++clock_};
  ++made_;
}

}  // namespace kiln::tracer
