// Symbolic bounds (symbolic_shapes.h): a slice's start and end and a select's index that
// move between walks become index symbols, matched and bound per walk like symbolic sizes.
#include <algorithm>
#include <map>
#include <tuple>

#include "runtime/error.h"
#include "tracer/symbolic_shapes.h"

namespace kiln::tracer {
namespace {

// The op's attributes with the fields its bounds make symbols cleared (all of a slice's
// or select's bounds when `all`), for comparing the rest.
OpAttrs without_bounds(OpId op, const OpAttrs& attrs, const SymbolicBounds& bounds, bool all) {
  OpAttrs out = attrs;
  if (!has_bounds(op)) return out;
  if (all || bounds.start >= 0) out.start = 0;
  if (all || bounds.end >= 0) out.end = 0;
  return out;
}

// A slice's extent along its dim for an input of size n (the shape rule's clamping).
int64_t slice_extent(const OpAttrs& a, int64_t n) {
  int64_t start = a.start < 0 ? a.start + n : a.start;
  int64_t end = a.end < 0 ? a.end + n : a.end;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return a.step > 0 ? (end - start + a.step - 1) / a.step : 0;
}

int64_t wrapped_dim(int64_t dim, size_t rank) {
  return dim < 0 ? dim + static_cast<int64_t>(rank) : dim;
}

// The extent of a recorded slice: its output's size along the sliced dim.
int64_t recorded_extent(const TraceOp& op) {
  const int64_t d = wrapped_dim(op.attrs.dim, op.meta.sizes.size());
  return d >= 0 && static_cast<size_t>(d) < op.meta.sizes.size() ? op.meta.sizes[d] : -1;
}

// Whether an extent passes a symbolic slice's rule: the recorded one, or any >= 2.
bool extent_passes(const SymbolicBounds& b, int64_t extent) {
  return b.extent >= 0 ? extent == b.extent : extent >= 2;
}

// The op's bound fields: (name, symbol, value), start first.
struct Field {
  const char* name;
  int16_t symbol;
  int64_t value;
};
boost::container::small_vector<Field, 2> fields_of(const TraceOp& op) {
  boost::container::small_vector<Field, 2> out;
  if (op.op == OpId::Slice) {
    out.push_back({"start", op.bounds.start, op.attrs.start});
    out.push_back({"end", op.bounds.end, op.attrs.end});
  } else if (op.op == OpId::Select) {
    out.push_back({"index", op.bounds.start, op.attrs.start});
  }
  return out;
}

}  // namespace

bool has_bounds(OpId op) { return op == OpId::Slice || op == OpId::Select; }

bool same_but_bounds(const TraceOp& a, const TraceOp& b) {
  if (!has_bounds(a.op) || a.op != b.op) return a.same_wiring(b);
  TraceOp x = a, y = b;
  x.attrs = without_bounds(a.op, a.attrs, a.bounds, true);
  y.attrs = without_bounds(b.op, b.attrs, b.bounds, true);
  x.bounds = y.bounds = SymbolicBounds{};
  return x.same_wiring(y);
}

bool generalize_bounds(const TraceProgram& seen, const TraceProgram& now, Generalized& out,
                       GeneralizeFailure* failure) {
  // An index symbol is keyed by (seen's symbol or -1, seen's value, now's value), as a
  // size symbol is: fields that moved together share it.
  std::map<std::tuple<int, int64_t, int64_t>, int16_t> symbols;
  out.bounds.assign(now.ops.size(), SymbolicBounds{});
  for (size_t i = 0; i < now.ops.size(); ++i) {
    const TraceOp& x = seen.ops[i];
    const TraceOp& y = now.ops[i];
    if (!has_bounds(y.op)) continue;
    const auto xs = fields_of(x), ys = fields_of(y);
    SymbolicBounds b;
    for (size_t f = 0; f < ys.size(); ++f) {
      const int16_t was = xs[f].symbol;
      if (was < 0 && xs[f].value == ys[f].value) continue;
      const auto key =
          std::make_tuple(static_cast<int>(was), was < 0 ? xs[f].value : 0, ys[f].value);
      auto it = symbols.find(key);
      if (it == symbols.end()) {
        KILN_CHECK(symbols.size() < 32000, Error, "[trace] too many symbolic bounds");
        it = symbols.emplace(key, static_cast<int16_t>(symbols.size())).first;
      }
      (f == 0 ? b.start : b.end) = it->second;
    }
    if (b.any() && y.op == OpId::Slice) {
      // The extent stays exact while it does not move; else it varies as a symbolic size
      // does, >= 2 on both sides (0 and 1 specialised).
      const int64_t before = x.bounds.any() ? x.bounds.extent : recorded_extent(x);
      const int64_t extent = recorded_extent(y);
      const bool varied = x.bounds.any() && x.bounds.extent < 0;
      if (!varied && before == extent) {
        b.extent = extent;
      } else if (extent < 2 || (!varied && before < 2)) {
        if (failure) *failure = GeneralizeFailure::ZeroOrOne;
        return false;
      }
    }
    out.bounds[i] = b;
  }
  out.index_symbols = static_cast<int>(symbols.size());
  return true;
}

bool subsumes_bounds(const TraceProgram& general, const TraceProgram& specific) {
  std::vector<std::optional<int64_t>> values(static_cast<size_t>(index_symbol_count(general)));
  for (size_t i = 0; i < general.ops.size(); ++i) {
    const TraceOp& g = general.ops[i];
    const TraceOp& h = specific.ops[i];
    if (!has_bounds(g.op)) continue;
    const auto gs = fields_of(g), hs = fields_of(h);
    for (size_t f = 0; f < gs.size(); ++f) {
      const int16_t s = gs[f].symbol;
      if (s < 0) {
        if (hs[f].symbol >= 0 || gs[f].value != hs[f].value) return false;
      } else if (hs[f].symbol < 0) {
        if (values[s] && *values[s] != hs[f].value) return false;
        values[s] = hs[f].value;
      }
    }
    if (g.bounds.any() && g.op == OpId::Slice) {
      if (h.bounds.any() ? (g.bounds.extent >= 0 && h.bounds.extent != g.bounds.extent)
                         : !extent_passes(g.bounds, recorded_extent(h)))
        return false;
    }
  }
  return true;
}

bool match_bounds(const TraceOp& edge, const OpCall& call,
                  std::vector<std::optional<int64_t>>& values) {
  if (!(without_bounds(edge.op, edge.attrs, edge.bounds, false) ==
        without_bounds(call.op, call.attrs, edge.bounds, false)))
    return false;
  const int16_t symbol[2] = {edge.bounds.start, edge.bounds.end};
  const int64_t value[2] = {call.attrs.start, call.attrs.end};
  for (int f = 0; f < 2; ++f) {
    const int16_t s = symbol[f];
    if (s < 0) continue;
    if (static_cast<size_t>(s) < values.size() && values[s] && *values[s] != value[f]) return false;
    if (f == 1 && symbol[0] == s && value[0] != value[1]) return false;
  }
  if (call.op == OpId::Slice && !call.inputs.empty()) {
    const Dims& sizes = call.inputs[0].sizes();
    const int64_t d = wrapped_dim(call.attrs.dim, sizes.size());
    if (d < 0 || static_cast<size_t>(d) >= sizes.size()) return false;
    if (!extent_passes(edge.bounds, slice_extent(call.attrs, sizes[d]))) return false;
  }
  for (int f = 0; f < 2; ++f) {
    const int16_t s = symbol[f];
    if (s < 0) continue;
    if (values.size() <= static_cast<size_t>(s)) values.resize(static_cast<size_t>(s) + 1);
    values[s] = value[f];
  }
  return true;
}

std::string bounds_diff(const TraceOp& edge, const TraceOp& actual,
                        const std::vector<std::optional<int64_t>>& values) {
  if (!edge.bounds.any() || !same_but_bounds(edge, actual)) return "";
  const auto es = fields_of(edge), as = fields_of(actual);
  for (size_t f = 0; f < es.size(); ++f) {
    const int16_t s = es[f].symbol;
    if (s < 0) {
      if (es[f].value != as[f].value)
        return detail::cat(op_name(edge.op), "'s ", es[f].name, " expected ", es[f].value, ", got ",
                           as[f].value);
    } else if (static_cast<size_t>(s) < values.size() && values[s] && *values[s] != as[f].value) {
      return detail::cat(op_name(edge.op), "'s ", es[f].name, " is i", s, ", ", *values[s],
                         " earlier in this walk, got ", as[f].value);
    }
  }
  if (edge.op == OpId::Slice && !extent_passes(edge.bounds, recorded_extent(actual)))
    return edge.bounds.extent >= 0
               ? detail::cat("slice's extent expected ", edge.bounds.extent, ", got ",
                             recorded_extent(actual))
               : detail::cat(
                     "slice's extent expected a size >= 2 (symbolic bounds; extents 0 "
                     "and 1 are specialised), got ",
                     recorded_extent(actual));
  return "";
}

std::string describe_bounds(const TraceProgram& program) {
  std::vector<std::string> lines(static_cast<size_t>(index_symbol_count(program)));
  const std::vector<int64_t> at = index_values_of(program);
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const TraceOp& op = program.ops[i];
    for (const Field& f : fields_of(op)) {
      if (f.symbol < 0) continue;
      std::string& line = lines[f.symbol];
      line += (line.empty() ? detail::cat("i", f.symbol, " = ") : std::string(" = ")) +
              detail::cat(f.name, " of op ", i, " (", op_name(op.op), " dim ", op.attrs.dim, ")");
    }
  }
  std::string out;
  for (size_t s = 0; s < lines.size(); ++s)
    out += (s ? "; " : "") + lines[s] + detail::cat(" (compiled at ", at[s], ")");
  return out;
}

void set_bounds(TraceProgram& program, const std::vector<SymbolicBounds>& bounds) {
  for (size_t i = 0; i < program.ops.size() && i < bounds.size(); ++i)
    program.ops[i].bounds = bounds[i];
}

int index_symbol_count(const TraceProgram& program) {
  int n = 0;
  for (const TraceOp& op : program.ops) n = std::max({n, op.bounds.start + 1, op.bounds.end + 1});
  return n;
}

std::vector<int64_t> index_values_of(const TraceProgram& program) {
  std::vector<int64_t> values(static_cast<size_t>(index_symbol_count(program)), 0);
  for (const TraceOp& op : program.ops)
    for (const Field& f : fields_of(op))
      if (f.symbol >= 0) values[f.symbol] = f.value;
  return values;
}

}  // namespace kiln::tracer
