#include "ops/registry.h"

#include <cstring>
#include <functional>

namespace kiln {
namespace {

constexpr OpInfo kOpTable[] = {
#define KILN_OP(id, name, family, rule) {OpId::id, #name, OpFamily::family, DTypeRule::rule},
#include "ops/ops.def"
#undef KILN_OP
};
static_assert(sizeof(kOpTable) / sizeof(kOpTable[0]) == kNumOps);

void hash_combine(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); }

}  // namespace

const OpInfo& op_info(OpId id) { return kOpTable[static_cast<int>(id)]; }

bool find_op(const std::string& name, OpId* out) {
  for (const OpInfo& info : kOpTable) {
    if (name == info.name) {
      *out = info.id;
      return true;
    }
  }
  return false;
}

bool OpAttrs::operator==(const OpAttrs& o) const {
  return dims == o.dims && dim == o.dim && start == o.start && end == o.end && step == o.step &&
         kernel[0] == o.kernel[0] && kernel[1] == o.kernel[1] && stride[0] == o.stride[0] &&
         stride[1] == o.stride[1] && padding[0] == o.padding[0] && padding[1] == o.padding[1] &&
         correction == o.correction && keepdim == o.keepdim && scalar_first == o.scalar_first &&
         has_min == o.has_min && has_max == o.has_max && approximate_tanh == o.approximate_tanh &&
         descending == o.descending && stable == o.stable && count == o.count &&
         replacement == o.replacement && causal == o.causal && reverse == o.reverse &&
         dtype == o.dtype && device == o.device;
}

size_t OpAttrs::hash() const {
  size_t h = dims.size();
  for (int64_t d : dims) hash_combine(h, std::hash<int64_t>()(d));
  for (int64_t v : {dim, start, end, step, kernel[0], kernel[1], stride[0], stride[1], padding[0],
                    padding[1], correction, count}) {
    hash_combine(h, std::hash<int64_t>()(v));
  }
  const size_t flags = (keepdim ? 1u : 0u) | (scalar_first ? 2u : 0u) | (has_min ? 4u : 0u) |
                       (has_max ? 8u : 0u) | (approximate_tanh ? 16u : 0u) |
                       (descending ? 32u : 0u) | (stable ? 64u : 0u) | (replacement ? 128u : 0u) |
                       (causal ? 256u : 0u) | (reverse ? 512u : 0u);
  hash_combine(h, flags);
  hash_combine(h, static_cast<size_t>(dtype));
  hash_combine(h, static_cast<size_t>(device.type) * 1024 + static_cast<size_t>(device.index));
  return h;
}

}  // namespace kiln
