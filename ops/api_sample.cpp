// multinomial, nonzero and masked_select (ops/api.h).
//
// nonzero's output shape depends on the input's values, so it is a graph break: it ends
// the current trace with the DataDependentShape reason (lazy::sync), counts the nonzero elements
// eagerly and untraced (NoHookScope) and then dispatches the Nonzero op with that count as an
// attribute. A later trace can record and replay the op: the count is part of its key,
// so a replay only matches when the fresh count (always read first) is the same.
// masked_select is index_select of the flattened input at the flattened mask's nonzero
// positions, so its gradient is index_select's.
#include "ops/api.h"
#include "ops/dispatch.h"
#include "runtime/error.h"

namespace kiln {

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement,
                   std::optional<RandomState> state) {
  KILN_CHECK(probs.defined(), ValueError, "[multinomial] probs is undefined");
  const RandomState st = state ? *state : next_random_state();
  OpCall call{OpId::Multinomial,
              {probs},
              {Scalar(static_cast<int64_t>(st.seed)), Scalar(static_cast<int64_t>(st.offset))},
              {}};
  call.attrs.count = num_samples;
  call.attrs.replacement = replacement;
  return dispatch(call);
}

namespace {

// nonzero for `op` (nonzero, or masked_select built on it): `op` names the break.
Tensor nonzero_for(const char* op, const Tensor& x, std::source_location loc) {
  lazy::sync(op, SourceSite::from(loc), lazy::SyncKind::DataDependentShape);
  int64_t count = 0;
  {
    NoHookScope untraced;
    count = sum(ne(x, 0)).item(loc).to_int();
  }
  OpCall call{OpId::Nonzero, {x}, {}, {}};
  call.attrs.count = count;
  return dispatch(call);
}

}  // namespace

Tensor nonzero(const Tensor& x, std::source_location loc) {
  KILN_CHECK(x.defined(), ValueError, "[nonzero] input is undefined");
  return nonzero_for("nonzero", x, loc);
}

Tensor masked_select(const Tensor& x, const Tensor& mask, std::source_location loc) {
  KILN_CHECK(x.defined() && mask.defined(), ValueError, "[masked_select] undefined argument");
  KILN_CHECK(mask.dtype() == DType::Bool, DTypeError,
             "[masked_select] expected mask of dtype bool, got ", dtype_name(mask.dtype()));
  const Dims sizes = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  const Tensor positions =
      nonzero_for("masked_select", mask.expand(sizes).reshape({-1}), loc).reshape({-1});
  return index_select(x.expand(sizes).reshape({-1}), 0, positions);
}

}  // namespace kiln
