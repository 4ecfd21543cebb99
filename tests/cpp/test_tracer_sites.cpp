// Exact sites in C++ (tracer/user_site.h): SiteScope marks ops with its
// std::source_location (line and column), so two identical ops on one line in two scopes
// are two sites and do not close a loop; a loop closes only where the stream really
// comes round. Traced results are compared with the same computation run eagerly.
#include "tracer/user_site.h"
#include "tracer_util.h"

namespace kt {
namespace {

namespace tr = kiln::tracer;

// x - y at the caller's place: two calls on one line are two sites (their columns).
Tensor sub_here(const Tensor& x, const Tensor& y,
                std::source_location loc = std::source_location::current()) {
  tr::SiteScope here(loc);
  return x - y;
}

tr::UserSite site_here(std::source_location loc = std::source_location::current()) {
  tr::SiteScope here(loc);
  return tr::current_site();
}

tr::SiteId op_site_here(std::source_location loc = std::source_location::current()) {
  tr::SiteScope here(loc);
  return tr::current_op_site();
}

// A layernorm written out, the repeated `x - mu` of the variance on one line.
Tensor layernorm(const Tensor& x) {
  Tensor mu = kiln::mean(x, {-1}, true);
  Tensor var = kiln::mean(sub_here(x, mu) * sub_here(x, mu), {-1}, true);
  return sub_here(x, mu) / kiln::sqrt(var + 1e-5);
}

TEST_F(TracerTest, SitesTellTwoOpsOnOneLineApart) {
  const std::pair<tr::UserSite, tr::UserSite> two{site_here(), site_here()};
  const tr::UserSite& first = two.first;
  const tr::UserSite& second = two.second;
  EXPECT_EQ(first.line, second.line);
  EXPECT_NE(first.column, second.column);
  EXPECT_NE(first.function.find("TestBody"), std::string::npos) << first.function;
  EXPECT_NE(first.stable_key(), second.stable_key());
  EXPECT_NE(first.str_exact(), second.str_exact());
  EXPECT_EQ(tr::current_op_site(), 0u);  // no scope, no Python: unknown
  const std::pair<tr::SiteId, tr::SiteId> ids{op_site_here(), op_site_here()};
  EXPECT_NE(ids.first, 0u);
  EXPECT_NE(ids.first, ids.second);
  EXPECT_EQ(tr::current_op_site(), 0u);  // the scopes closed
}

TEST_F(TracerTest, WrittenOutLayernormLoopIsOneTrace) {
  Tensor x = random_tensor({16, 32});
  const Host expected = read(eager([&] { return layernorm(x); }));
  std::vector<Tensor> outs;
  for (int i = 0; i < 12; ++i) outs.push_back(layernorm(x));  // no host read: loops close
  for (const Tensor& y : outs) EXPECT_TRUE(all_close(y, expected, tol_pointwise(DType::Float32)));
  const auto report = tr::explain();
  ASSERT_EQ(report.traces.size(), 1u) << report.table();
  EXPECT_TRUE(report.recompiles.empty()) << report.table();
  EXPECT_EQ(report.traces[0].ops.size(), 9u) << report.table();
  EXPECT_GE(report.traces[0].replays, 8);
}

TEST_F(TracerTest, UnscopedOpsKeepLoopHeadsByWiring) {
  // Without sites the same op on the same inputs closes the loop, as before sites.
  Tensor x = random_tensor({8});
  for (int i = 0; i < 10; ++i) {
    Tensor y = kiln::exp(x) * 2.0;
    (void)y;
  }
  (void)kiln::sum(x).item<double>();
  const auto report = tr::explain();
  ASSERT_EQ(report.traces.size(), 1u) << report.table();
  EXPECT_EQ(report.traces[0].ops.size(), 2u);
}

}  // namespace
}  // namespace kt
