// Symbolic sizes and bounds (issue 21): a trace whose guards fail only on sizes, or whose
// slices and selects take other bounds, compiles once with those dims and bounds symbolic
// instead of once per size and position (symbolic_bounds.cpp holds the bounds' part).
//
//   generalize   two programs that are the same trace but for the sizes and strides of
//                their inputs: the dims that differ (both sizes >= 2) become symbols; dims
//                with equal pairs of sizes share a symbol, so the guard is a relation
//                ("dim 0 of in0 equals dim 0 of in3"); a stride that differs must be the
//                contiguous stride of the sizes on both sides. Sizes 0 and 1 are never
//                made symbolic (broadcasting and empty tensors stay specialised): such a
//                variant compiles exactly, and counts as a recompile.
//   match        a walk binds each symbol to the first size it meets (>= 2) and checks
//                every later dim of that symbol against it (Walk::symbol_values).
//   SizeBindings the kernels of the LLVM backend already take sizes and strides as
//                run-time arguments (jit/lower.h); what depends on the sizes is the plan
//                around them (fusion groups' collapsed shapes, the memory arena). A
//                replay at sizes not seen yet binds the trace to them: the program with
//                this walk's shapes goes through the backend again, whose kernels come
//                from the in-memory kernel cache (no code generation unless a collapse
//                differs), and the result is kept per tuple of symbol values (LRU, 64).
//
//   bounds       the same for a slice's start and end and a select's index (op attributes):
//                those that differ between the two programs become index symbols (i0,
//                i1, ...; fields that moved together share one), so a KV-cache write at a
//                moving position (`k[:, pos:pos + 1] = y`) and a growing view of it
//                (`k[:, :pos + 1]`) follow one path. A slice's extent along its dim is
//                kept exact where it did not change, else it varies as a symbolic size
//                does (>= 2 on both sides; 0 and 1 specialised). The bounds stay checked
//                as in eager (the op's shape rule runs before the tracer sees the call:
//                clamping, an index out of range raises). A binding is keyed by the size
//                and index symbols' values together: the plan at each position is the
//                program at that position.
//
// Only CPU traces are generalized: a CUDA trace (NVRTC kernels, CUDA Graphs captured per
// shape) stays specialised per size and bounds, as before.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tracer/backend.h"

namespace kiln::tracer {

struct CompiledTrace;

// Whether a and b are the same trace but for their external inputs' sizes and strides
// and the bounds of their slices and selects: same ops, other attributes, wiring, scalar
// kinds, and guards of the same dtype, device, rank and aliasing.
bool same_but_sizes(const TraceProgram& a, const TraceProgram& b);

// Whether an op's bounds may be symbolic: a slice (start, end) or a select (its index).
bool has_bounds(OpId op);

struct Generalized {
  std::vector<TensorGuard> guards;     // now's guards, symbolic
  std::vector<SymbolicBounds> bounds;  // per op of now
  int symbols = 0;
  int index_symbols = 0;
};
enum class GeneralizeFailure : uint8_t { Structure, ZeroOrOne, Strides, NothingDiffers };

// now's guards with the dims that differ from `seen` (or are symbolic there) symbolic,
// or why not.
std::optional<Generalized> generalize(const TraceProgram& seen, const TraceProgram& now,
                                      GeneralizeFailure* failure);

// Whether every input `specific` takes passes `general`'s guards too (same trace; each
// exact size of specific is that size or a symbol there, its symbols symbols there).
bool subsumes(const TraceProgram& general, const TraceProgram& specific);

// Why an actual input fails a symbolic guard given the walk's symbol values (for the
// side exit's reason): "dim 0 is s0, 4 earlier in this walk, got 6"; "" if it passes.
std::string symbolic_diff(const TensorGuard& g, const TensorGuard& actual,
                          const std::vector<int64_t>& values);

// "s0 = dim 0 of in0 = dim 0 of in3 (compiled at 12)", per symbol, "; " between; then
// the index symbols: "i0 = start of op 2 (slice dim 1) = ... (compiled at 5)".
std::string describe_symbols(const TraceProgram& program);
// Replaces the program's guards, in order, by `guards`, and its ops' bounds by `bounds`.
void set_guards(TraceProgram& program, const std::vector<TensorGuard>& guards);
void set_bounds(TraceProgram& program, const std::vector<SymbolicBounds>& bounds);
bool is_symbolic(const TraceProgram& program);
int symbol_count(const TraceProgram& program);
int index_symbol_count(const TraceProgram& program);
// The value of each symbol in the program's own (concrete) sizes; of each index symbol.
std::vector<int64_t> symbol_values_of(const TraceProgram& program);
std::vector<int64_t> index_values_of(const TraceProgram& program);

// Whether a call's attributes pass an op's symbolic bounds: its other attributes equal,
// each index symbol's field equal to the value the walk bound it to (else, on success,
// binding it in `values`), a slice's extent kept.
bool match_bounds(const TraceOp& edge, const OpCall& call,
                  std::vector<std::optional<int64_t>>& values);
// Why a call fails an op's symbolic bounds ("start is i0, 3 earlier in this walk, got
// 5"), "" if it passes or the op is exact.
std::string bounds_diff(const TraceOp& edge, const TraceOp& actual,
                        const std::vector<std::optional<int64_t>>& values);

// Whether t passes a symbolic guard (dtype, device and aliasing aside), binding the
// symbols it meets first in `values` (0: unbound) and appending them to `bound`.
bool match_symbolic_sizes(const TensorGuard& g, const Tensor& t, std::vector<int64_t>& values,
                          std::vector<int16_t>& bound);

// The bounds' parts of the above (symbolic_bounds.cpp): same_wiring but for the bounds;
// now's bounds against seen's into out.bounds and out.index_symbols (false: why in
// *failure); whether general's bounds pass every op of specific; "i0 = ..." per symbol.
bool same_but_bounds(const TraceOp& a, const TraceOp& b);
bool generalize_bounds(const TraceProgram& seen, const TraceProgram& now, Generalized& out,
                       GeneralizeFailure* failure);
bool subsumes_bounds(const TraceProgram& general, const TraceProgram& specific);
std::string describe_bounds(const TraceProgram& program);

// A symbolic compiled trace's plans per tuple of symbol values (see above).
class SizeBindings {
 public:
  static constexpr size_t kMost = 64;
  std::shared_ptr<const CompiledTrace> find(const std::vector<int64_t>& key);
  void add(const std::vector<int64_t>& key, std::shared_ptr<const CompiledTrace> bound);
  int64_t made() const { return made_; }  // bindings made so far (evicted ones included)
  double ms() const { return ms_; }       // their binding time in all
  void note_time(double ms) { ms_ += ms; }

 private:
  struct Entry {
    std::shared_ptr<const CompiledTrace> trace;
    uint64_t last_use = 0;
  };
  std::map<std::vector<int64_t>, Entry> entries_;
  uint64_t clock_ = 0;
  int64_t made_ = 0;
  double ms_ = 0;
};

}  // namespace kiln::tracer
