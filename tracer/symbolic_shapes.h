// Symbolic sizes (issue 21): a trace whose guards fail only on sizes compiles once with
// those dims symbolic instead of once per size.
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
// Only CPU traces are generalized: a CUDA trace (NVRTC kernels, CUDA Graphs captured per
// shape) stays specialised per size, as before.
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

// Whether a and b are the same trace but for their external inputs' sizes and strides:
// same ops, attributes, wiring, scalar kinds, and guards of the same dtype, device, rank
// and aliasing.
bool same_but_sizes(const TraceProgram& a, const TraceProgram& b);

struct Generalized {
  std::vector<TensorGuard> guards;  // now's guards, symbolic
  int symbols = 0;
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

// "s0 = dim 0 of in0 = dim 0 of in3 (compiled at 12)", per symbol, "; " between.
std::string describe_symbols(const TraceProgram& program);
// Replaces the programs' guards, in order, by `guards`.
void set_guards(TraceProgram& program, const std::vector<TensorGuard>& guards);
bool is_symbolic(const TraceProgram& program);
int symbol_count(const TraceProgram& program);
// The value of each symbol in the program's own (concrete) sizes.
std::vector<int64_t> symbol_values_of(const TraceProgram& program);

// Whether t passes a symbolic guard (dtype, device and aliasing aside), binding the
// symbols it meets first in `values` (0: unbound) and appending them to `bound`.
bool match_symbolic_sizes(const TensorGuard& g, const Tensor& t, std::vector<int64_t>& values,
                          std::vector<int16_t>& bound);

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
