// Symbolic sizes (tracer/symbolic_shapes.h): traces replayed at sizes other than the
// ones they were recorded at, checked against a host reference on fresh random inputs.
#include <cmath>

#include <gtest/gtest.h>

#include "tracer_util.h"

namespace kt {
namespace {

namespace tr = kiln::tracer;

class SymbolicShapesTest : public LlvmJitTest {
 protected:
  void SetUp() override {
    LlvmJitTest::SetUp();
    tr::config().symbolic_shapes = true;
  }
};

// One anchor (the multiply), then abs or neg: the two traces share their first op.
Tensor scale_then(const Tensor& x, bool negate) {
  Tensor y = x * 2.0;
  return negate ? kiln::neg(y) : kiln::abs(y);
}

Host scale_then_reference(const Host& x, bool negate) {
  return map(x, [negate](double v) { return negate ? -2.0 * v : std::fabs(2.0 * v); });
}

void check_scale_then(const Dims& sizes, bool negate) {
  SCOPED_TRACE(std::string(negate ? "neg " : "abs ") + dims_string(sizes));
  const Host h = random_host(sizes, DType::Float32);
  const Tensor x = make(h, DType::Float32);
  const Tensor y = scale_then(x, negate);
  ASSERT_EQ(y.sizes(), sizes);
  const Host out = read(y);  // the host read ends the walk
  ASSERT_EQ(out.sizes, sizes);
  EXPECT_TRUE(all_close(out, scale_then_reference(h, negate), tol_pointwise(DType::Float32)));
}

// mul + abs: compiled at [3, 5], then at once with both dims symbolic at [4, 6].
void compile_symbolic_abs() {
  for (const Dims& sizes : {Dims{3, 5}, Dims{3, 5}, Dims{3, 5}, Dims{4, 6}, Dims{9, 4}})
    check_scale_then(sizes, false);
  const auto report = tr::explain();
  bool symbolic = false;
  for (const auto& t : report.traces) symbolic = symbolic || !t.symbolic.empty();
  ASSERT_TRUE(symbolic) << report.table();
}

// Replays of the symbolic traces whose ops include `op`.
int64_t symbolic_replays_with(const std::string& op) {
  int64_t replays = 0;
  for (const auto& t : tr::explain().traces) {
    bool has = false;
    for (const std::string& o : t.ops) has = has || o.find(op) != std::string::npos;
    if (has && !t.symbolic.empty()) replays += t.replays;
  }
  return replays;
}

// A walk that replays the symbolic multiply and leaves it at neg records neg below the
// symbolic node: one trie node for every size the prefix passes, whose meta is that of
// the walk that recorded it first ([5, 7]). The trace compiled from a later walk at
// [4, 6] must take every op's metadata from that walk, or its executable makes neg's
// output at [5, 7] for a [4, 6] input (the unary suite run as one process saw a
// permuted [131, 257] input replay with an earlier size's [3, 5] output).
TEST_F(SymbolicShapesTest, APathRecordedBelowASymbolicOpCompilesAtItsOwnSizes) {
  compile_symbolic_abs();
  for (const Dims& sizes :
       {Dims{5, 7}, Dims{4, 6}, Dims{4, 6}, Dims{4, 6}, Dims{5, 7}, Dims{11, 3}, Dims{4, 6}})
    check_scale_then(sizes, true);
  for (const Dims& sizes : {Dims{3, 5}, Dims{7, 7}}) check_scale_then(sizes, false);
  EXPECT_GE(symbolic_replays_with("neg"), 3) << tr::explain().table();
}

// The same path compiled at sizes other than the symbolic prefix's ([6, 8], not [4, 6]):
// its symbolic multiply is the trie node the walks follow (guards that pass the same
// inputs match whatever sizes they were compiled at), so the trace replays instead of
// being installed on a second, unreachable copy of the prefix and recompiled per walk.
TEST_F(SymbolicShapesTest, ASymbolicVariantCompiledAtOtherSizesSharesThePrefix) {
  compile_symbolic_abs();
  for (const Dims& sizes :
       {Dims{5, 7}, Dims{6, 8}, Dims{6, 8}, Dims{6, 8}, Dims{5, 7}, Dims{11, 3}, Dims{6, 8}})
    check_scale_then(sizes, true);
  for (const Dims& sizes : {Dims{3, 5}, Dims{7, 7}}) check_scale_then(sizes, false);
  const auto report = tr::explain();
  EXPECT_GE(symbolic_replays_with("neg"), 4) << report.table();
  EXPECT_LE(report.recompiles.size(), 2u) << report.table();
}

}  // namespace
}  // namespace kt
