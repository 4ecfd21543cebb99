// TraceOp: one recorded op of a trace, with its inputs as references (an external
// input slot, or the value of an earlier op of the same trace) and, for each external
// input first used here, the guard it must pass. Scalars are not part of a TraceOp:
// they are run-time arguments of the compiled trace, so x * 0.5 and x * 0.7 share a trace.
#pragma once

#include <string>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "ops/registry.h"
#include "tracer/user_site.h"

namespace kiln::tracer {

struct InputRef {
  enum class Kind : uint8_t { External, Value };
  Kind kind = Kind::External;
  int32_t index = 0;  // external slot, or index of the producing op in the trace
  bool operator==(const InputRef& o) const { return kind == o.kind && index == o.index; }
};

// What an external input must look like for a compiled trace to be valid for it.
// Exact (symbols empty): these sizes and strides. Symbolic (symbolic_shapes.h): a dim
// with symbol s >= 0 takes any size >= 2 equal to every other dim of symbol s in the
// walk ("dim 0 of in0 equals dim 0 of in3"), sizes 0 and 1 stay specialised; a stride
// whose bit is set in derived_strides must be the contiguous stride of the actual sizes
// (it follows a symbolic dim inside it), the others are exact. sizes and strides keep the
// values the trace was compiled with either way.
struct TensorGuard {
  DType dtype = DType::Float32;
  Device device;
  Dims sizes;
  Dims strides;
  int32_t alias_of = -1;  // first external slot sharing this one's storage, or -1
  boost::container::small_vector<int16_t, 4> symbols;  // per dim: its symbol, or -1
  uint32_t derived_strides = 0;                        // bit d: stride d follows the sizes

  static TensorGuard of(const Tensor& t, int32_t alias_of);
  bool symbolic() const { return !symbols.empty(); }
  bool operator==(const TensorGuard& o) const {
    return dtype == o.dtype && device == o.device && sizes == o.sizes && strides == o.strides &&
           alias_of == o.alias_of && symbols == o.symbols && derived_strides == o.derived_strides;
  }
  // "" when equal, else the first difference: "shape expected [8, 4], got [16, 4]". A
  // symbolic dim differs only when the actual size is 0 or 1.
  std::string diff(const TensorGuard& actual) const;
  std::string str() const;  // "float32[8, 4] cpu contiguous"; symbolic dims as s0
};

// A slice's or select's bounds that moved between walks (symbolic_shapes.h): the index
// symbol of attrs.start (a select's index) and of attrs.end, or -1 (exact), and for a
// slice its extent along its dim where that stays the same (>= 0), or -1: any extent >= 2
// (as a symbolic size: extents 0 and 1 stay specialised). A walk binds each index symbol
// to the first value it meets; the attributes keep the values the trace was compiled with.
struct SymbolicBounds {
  int16_t start = -1, end = -1;
  int64_t extent = -1;
  bool any() const { return start >= 0 || end >= 0; }
  bool operator==(const SymbolicBounds& o) const {
    return start == o.start && end == o.end && extent == o.extent;
  }
};

struct TraceOp {
  OpId op = OpId::Add;
  OpAttrs attrs;
  SymbolicBounds bounds;  // exact unless a symbolic trace made them symbols
  boost::container::small_vector<InputRef, 3> inputs;
  boost::container::small_vector<TensorGuard, 2> new_guards;  // for externals first seen here
  boost::container::small_vector<Scalar::Kind, 3> scalar_kinds;
  bool in_place = false;  // writes into `target` instead of producing a new tensor
  InputRef target;
  OutputMeta meta;  // what the op produces (or the in-place result's metadata)
  // Where the op was called (user_site.h; 0: unknown). Not part of matches(): a compiled
  // path is followed by wiring and guards; sites decide anchors and loop heads.
  SiteId site = 0;

  // Same op, attributes, input references, scalar kinds and guards (guards that pass the
  // same inputs: symbolic ones compiled at other sizes match, symbolic_shapes.h).
  bool matches(const TraceOp& o) const;
  // The same, ignoring the guards (the same op at the same place in the program).
  bool same_wiring(const TraceOp& o) const;
  // The same op, attributes and internal inputs, with externals where o has externals
  // (any slots), at least one of each: a loop body's op on loop-invariant values made
  // earlier in the walk and on the iteration's fresh input (Walk::closes_loop).
  bool same_but_fresh_externals(const TraceOp& o) const;
  // The same wiring at the same site: the same op at the same place in the program.
  bool same_place(const TraceOp& o) const { return site == o.site && same_wiring(o); }
  // Same op and attributes and wiring, but a guard differs: which one and how. With the
  // walk's symbol values (symbolic_shapes.h), a relation that fails is named too.
  std::string guard_diff(const TraceOp& actual,
                         const std::vector<int64_t>* symbols = nullptr) const;
  std::string str() const;  // "add(e0, v1)"
};

}  // namespace kiln::tracer
