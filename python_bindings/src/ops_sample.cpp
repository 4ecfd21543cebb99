// Module-level multinomial, nonzero and masked_select (ops/api_sample.cpp), and the
// global generator's (seed, offset) for kiln.get_rng_state / set_rng_state. nonzero and
// masked_select read values on the host (a graph break); the user's Python line is the
// site the tracer reports. kiln/_along_dim.py adds the keyword forms and methods.
#include "common.h"

namespace kiln::python {
namespace {

using T = const Tensor&;

// seed/offset: a generator's own stream (kiln.Generator draws them); None: the global one.
Tensor multinomial_fn(T probs, int64_t num_samples, bool replacement, const bp::object& seed,
                      const bp::object& offset) {
  std::optional<RandomState> state;
  if (!seed.is_none()) {
    state = RandomState{bp::extract<uint64_t>(seed)(), bp::extract<uint64_t>(offset)()};
  }
  return kiln::multinomial(probs, num_samples, replacement, state);
}

}  // namespace

void register_sample_ops() {
  bp::def("multinomial", &multinomial_fn,
          (bp::arg("input"), bp::arg("num_samples"), bp::arg("replacement") = false,
           bp::arg("seed") = bp::object(), bp::arg("offset") = bp::object()));
  bp::def(
      "_random_state", +[] {
        const RandomState s = current_random_state();
        return bp::make_tuple(s.seed, s.offset);
      });
  bp::def(
      "_restore_random_state", +[](uint64_t seed, uint64_t offset) {
        restore_random_state(RandomState{seed, offset});
      });
  bp::def(
      "nonzero", +[](T x) { return kiln::nonzero(x); }, bp::arg("input"));
  bp::def(
      "masked_select", +[](T x, T mask) { return kiln::masked_select(x, mask); },
      (bp::arg("input"), bp::arg("mask")));
}

}  // namespace kiln::python
