// The on-disk form of a stored trace (tracer/persist.h): a round trip keeps every field
// the walk matches on, and a payload that is cut short, bit-flipped in its counts, of
// another format version or of another build is refused with a reason, never half read.
#include <gtest/gtest.h>

#include <random>

#include "tracer/persist.h"

namespace kiln::tracer {
namespace {

TraceOp op_of(OpId id, std::vector<InputRef> inputs, Dims sizes, int new_externals) {
  TraceOp op;
  op.op = id;
  for (const InputRef& r : inputs) op.inputs.push_back(r);
  for (int i = 0; i < new_externals; ++i) {
    TensorGuard g;
    g.sizes = sizes;
    g.strides = contiguous_strides(sizes);
    g.alias_of = i == 1 ? 0 : -1;
    op.new_guards.push_back(g);
  }
  op.meta.sizes = sizes;
  op.meta.strides = contiguous_strides(sizes);
  return op;
}

StoredTrace sample(std::mt19937_64& rng) {
  const Dims sizes = {static_cast<int64_t>(rng() % 7 + 1), static_cast<int64_t>(rng() % 5 + 1)};
  StoredTrace t;
  t.anchor_key = "train.py|step|40|+34|#0123456789abcdef@feedface";
  TraceOp mul =
      op_of(OpId::Mul, {{InputRef::Kind::External, 0}, {InputRef::Kind::External, 1}}, sizes, 2);
  mul.scalar_kinds.push_back(Scalar::Kind::Float);
  TraceOp sum = op_of(OpId::Sum, {{InputRef::Kind::Value, 0}}, {sizes[0]}, 0);
  sum.attrs.dims = {1};
  sum.attrs.keepdim = rng() % 2 == 0;
  TraceOp add =
      op_of(OpId::Add, {{InputRef::Kind::Value, 0}, {InputRef::Kind::External, 2}}, sizes, 1);
  add.in_place = true;
  add.target = {InputRef::Kind::External, 2};
  t.first = mul;
  t.program.ops = {mul, sum, add};
  t.program.num_externals = 3;
  t.program.num_scalars = 1;
  t.program.live = {false, true, rng() % 2 == 0};
  return t;
}

TEST(TracePersist, RoundTripKeepsWhatTheWalkMatches) {
  std::mt19937_64 rng(std::random_device{}());
  const StoredTrace t = sample(rng);
  StoredTrace back;
  std::string why;
  ASSERT_TRUE(decode_stored_trace(encode_stored_trace(t), &back, &why)) << why;
  EXPECT_EQ(back.anchor_key, t.anchor_key);
  EXPECT_TRUE(back.first.matches(t.first));
  ASSERT_EQ(back.program.ops.size(), t.program.ops.size());
  for (size_t i = 0; i < t.program.ops.size(); ++i) {
    EXPECT_TRUE(back.program.ops[i].matches(t.program.ops[i])) << i;
    EXPECT_EQ(back.program.ops[i].meta.sizes, t.program.ops[i].meta.sizes);
    EXPECT_EQ(back.program.ops[i].in_place, t.program.ops[i].in_place);
  }
  EXPECT_EQ(back.program.live, t.program.live);
  EXPECT_EQ(back.program.num_externals, 3);
  EXPECT_EQ(back.program.num_scalars, 1);
  EXPECT_EQ(program_hash(back.program), program_hash(t.program));
}

TEST(TracePersist, EveryTruncationIsRefused) {
  std::mt19937_64 rng(std::random_device{}());
  const std::string payload = encode_stored_trace(sample(rng));
  for (size_t n = 0; n < payload.size(); ++n) {
    StoredTrace back;
    std::string why;
    EXPECT_FALSE(decode_stored_trace(std::string_view(payload).substr(0, n), &back, &why)) << n;
    EXPECT_FALSE(why.empty());
  }
}

TEST(TracePersist, OtherVersionBuildAndWiringAreRefused) {
  std::mt19937_64 rng(std::random_device{}());
  StoredTrace t = sample(rng);
  std::string payload = encode_stored_trace(t);
  StoredTrace back;
  std::string why;

  std::string version = payload;
  version[0] = static_cast<char>(kFormatVersion + 1);
  EXPECT_FALSE(decode_stored_trace(version, &back, &why));
  EXPECT_NE(why.find("format version"), std::string::npos) << why;

  std::string build = payload;
  build[12] = static_cast<char>(build[12] ^ 0x20);  // the build id's first letter
  EXPECT_FALSE(decode_stored_trace(build, &back, &why));
  EXPECT_NE(why.find("another build"), std::string::npos) << why;

  // A value read before it is made, an external slot past the count.
  t.program.ops[1].inputs[0] = {InputRef::Kind::Value, 2};
  EXPECT_FALSE(decode_stored_trace(encode_stored_trace(t), &back, &why));
  EXPECT_NE(why.find("malformed"), std::string::npos) << why;
  t = sample(rng);
  t.program.ops[2].inputs[1] = {InputRef::Kind::External, 7};
  EXPECT_FALSE(decode_stored_trace(encode_stored_trace(t), &back, &why));
}

TEST(TracePersist, AnchorKeyNeedsAStableSite) {
  std::mt19937_64 rng(std::random_device{}());
  const StoredTrace t = sample(rng);
  UserSite none;
  EXPECT_EQ(anchor_key(t.first, none), "");
  UserSite site;
  site.key.push_back(SiteFrame{"train.py", "step", 40, 34, 0x1234});
  const std::string key = anchor_key(t.first, site);
  EXPECT_EQ(key.rfind(site.stable_key(), 0), 0u);
  // Guards aside: the same wiring with other shapes is the same anchor.
  TraceOp other = t.first;
  other.new_guards[0].sizes = {99, 3};
  EXPECT_EQ(anchor_key(other, site), key);
  other.op = OpId::Add;
  EXPECT_NE(anchor_key(other, site), key);
}

}  // namespace
}  // namespace kiln::tracer
