// The tracer's rules: warmup, guards, recompiles, side exits, outputs, in-place writes,
// aliasing, randomness, graph breaks with their source lines, fullgraph, the recompile
// limit, nested regions and exceptions. Every traced result is compared with the same
// computation run eagerly (tracing off) on the same random inputs.
#include "tracer_util.h"

namespace kt {
namespace {

using kiln::Scalar;
namespace tr = kiln::tracer;

Tensor mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2) {
  return kiln::softmax(kiln::linear(kiln::relu(kiln::linear(x, w1, b1)), w2), -1);
}

TEST_F(TracerTest, CompilesAfterWarmupAndReplaysEqualToEager) {
  Tensor x = random_tensor({8, 16}), w1 = random_tensor({32, 16}), b1 = random_tensor({32}),
         w2 = random_tensor({4, 32});
  const Host ref = read(eager([&] { return mlp(x, w1, b1, w2); }));
  for (int i = 0; i < 5; ++i) {
    Tensor y = mlp(x, w1, b1, w2);
    const double s = kiln::sum(y).item<double>();  // the boundary
    EXPECT_EQ(count_traces(), i < 1 ? 0u : 1u) << "iteration " << i;
    EXPECT_NEAR(s, 8.0, 1e-4);
    EXPECT_TRUE(all_close(y, ref, tol_pointwise(DType::Float32)));
  }
  const auto report = tr::explain();
  ASSERT_EQ(report.traces.size(), 1u);
  EXPECT_EQ(report.traces[0].ops.size(), 5u);  // linear relu linear softmax sum
  EXPECT_EQ(report.traces[0].replays, 3);
  EXPECT_EQ(report.traces[0].guards.size(), 4u);
  EXPECT_GT(report.ops_replayed, 0);
}

TEST_F(TracerTest, WarmupIsConfigurablePerRegion) {
  Tensor x = random_tensor({4, 4});
  for (int i = 0; i < 4; ++i) {
    tr::Region region({"warm4", 4, false});
    Tensor y = kiln::exp(x) * 2.0;
    (void)y;
    // the region exit is the boundary; the trace compiles at its 4th ending
  }
  EXPECT_EQ(count_traces(), 1u);
  tr::reset();
  for (int i = 0; i < 3; ++i) {
    tr::Region region({"warm4", 4, false});
    Tensor y = kiln::exp(x) * 2.0;
  }
  EXPECT_EQ(count_traces(), 0u);
}

TEST_F(TracerTest, ScalarsAreArgumentsNotConstants) {
  Tensor x = random_tensor({16});
  for (int i = 0; i < 6; ++i) {
    const double s = 0.25 * (i + 1);
    Tensor y = kiln::relu(x * s + 1.0);
    EXPECT_TRUE(all_close(y, read(eager([&] { return kiln::relu(x * s + 1.0); })),
                          tol_pointwise(DType::Float32)))
        << "scale " << s;
    (void)kiln::sum(y).item<double>();
  }
}

// Runs f(x) three times so that its trace is hot, then once on `other`.
template <class F>
void hot_then(F f, const Tensor& x, const Tensor& other) {
  for (int i = 0; i < 3; ++i) {
    Tensor y = f(x);
    (void)kiln::sum(kiln::abs(y)).item<double>();
  }
  Tensor y = f(other);
  const Host expected = read(eager([&] { return f(other); }));
  EXPECT_TRUE(all_close(y, expected, tol_pointwise(DType::Float64)));
  (void)kiln::sum(kiln::abs(y)).item<double>();
}

Tensor pointwise_chain(const Tensor& x) { return kiln::tanh(x * 2.0 + 1.0) * x; }

TEST_F(TracerTest, GuardOnShapeSideExitsAndRecompiles) {
  hot_then(pointwise_chain, random_tensor({8}), random_tensor({12}));
  hot_then(pointwise_chain, random_tensor({12}), random_tensor({12}));
  const auto report = tr::explain();
  ASSERT_FALSE(report.recompiles.empty());
  EXPECT_NE(report.recompiles[0].guard.find("shape[0] expected 8, got 12"), std::string::npos)
      << report.recompiles[0].guard;
}

TEST_F(TracerTest, GuardOnDtype) {
  hot_then(pointwise_chain, random_tensor({8}), random_tensor({8}, DType::Float64));
  hot_then(pointwise_chain, random_tensor({8}, DType::Float64), random_tensor({8}, DType::Float64));
  const auto report = tr::explain();
  ASSERT_FALSE(report.recompiles.empty());
  EXPECT_NE(report.recompiles[0].guard.find("dtype expected float32, got float64"),
            std::string::npos);
}

TEST_F(TracerTest, GuardOnRank) {
  hot_then(pointwise_chain, random_tensor({8}), random_tensor({2, 4}));
  hot_then(pointwise_chain, random_tensor({2, 4}), random_tensor({2, 4}));
  ASSERT_FALSE(tr::explain().recompiles.empty());
  EXPECT_NE(tr::explain().recompiles[0].guard.find("rank expected 1, got 2"), std::string::npos);
}

TEST_F(TracerTest, GuardOnStrides) {
  Tensor a = random_tensor({6, 5});
  Tensor t = random_tensor({5, 6}).t();  // same shape, transposed strides
  hot_then(pointwise_chain, a, t);
  hot_then(pointwise_chain, t, t);
  ASSERT_FALSE(tr::explain().recompiles.empty());
  EXPECT_NE(tr::explain().recompiles[0].guard.find("strides expected [5, 1], got [1, 6]"),
            std::string::npos)
      << tr::explain().recompiles[0].guard;
}

TEST_F(TracerTest, GuardOnDevice) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Tensor x = random_tensor({64});
  hot_then(pointwise_chain, x, x.cuda());
  hot_then(pointwise_chain, x.cuda(), x.cuda());
  ASSERT_FALSE(tr::explain().recompiles.empty());
  EXPECT_NE(tr::explain().recompiles[0].guard.find("device expected cpu, got cuda:0"),
            std::string::npos);
}

TEST_F(TracerTest, GuardOnAliasingBetweenInputs) {
  auto f = [](const Tensor& a, const Tensor& b) { return kiln::add(a * 2.0, b); };
  Tensor a = random_tensor({10}), b = random_tensor({10});
  for (int i = 0; i < 3; ++i) (void)kiln::sum(f(a, b)).item<double>();
  // Same storage for both arguments (a view of a): must not reuse the plan blindly.
  Tensor view = a.view({10});
  Tensor y = f(a, view);
  EXPECT_TRUE(all_close(y, read(eager([&] { return f(a, view); })), tol_pointwise(DType::Float32)));
  (void)kiln::sum(y).item<double>();
}

TEST_F(TracerTest, InPlaceAliasedInputsKeepEagerSemantics) {
  // x.add_(y) where y aliases x: the eager answer is 2x; a plan built for distinct
  // inputs must not be used.
  auto step = [](Tensor x, const Tensor& y) {
    x.add_(y);
    return x;
  };
  for (int i = 0; i < 3; ++i) {
    Tensor x = random_tensor({7}), y = random_tensor({7});
    const Host hx = read(x), hy = read(y);
    step(x, y);
    EXPECT_TRUE(all_close(x, map2(hx, hy, [](double p, double q) { return p + q; }),
                          tol_pointwise(DType::Float32)));
    (void)kiln::sum(x).item<double>();
  }
  Tensor x = random_tensor({7});
  const Host hx = read(x);
  step(x, x);
  EXPECT_TRUE(all_close(x, map(hx, [](double p) { return 2 * p; }), tol_pointwise(DType::Float32)));
}

TEST_F(TracerTest, SideExitMidTraceGivesEagerResults) {
  Tensor x = random_tensor({32});
  auto common = [&](bool diverge) {
    Tensor a = kiln::exp(x);
    Tensor b = a * 3.0;
    Tensor c = diverge ? kiln::sin(b) : kiln::cos(b);
    return c + a;
  };
  for (int i = 0; i < 3; ++i) (void)kiln::sum(common(false)).item<double>();
  Tensor d = common(true);  // leaves the hot trace at op 3
  EXPECT_TRUE(
      all_close(d, read(eager([&] { return common(true); })), tol_pointwise(DType::Float32)));
  Tensor e = common(false);  // and the hot trace still replays afterwards
  EXPECT_TRUE(
      all_close(e, read(eager([&] { return common(false); })), tol_pointwise(DType::Float32)));
  EXPECT_GE(tr::explain().traces[0].side_exits, 1);
}

TEST_F(TracerTest, HeldIntermediatesAreStoredDroppedOnesNeedNotBe) {
  Tensor x = random_tensor({16});
  for (int i = 0; i < 4; ++i) {
    Tensor kept = kiln::exp(x);
    Tensor out = kiln::sum(kept * 2.0);
    EXPECT_NEAR(out.item<double>(), 2 * kiln::sum(kiln::exp(x)).item<double>(), 1e-3);
    EXPECT_TRUE(all_close(kept, map(read(x), [](double v) { return std::exp(v); }),
                          tol_pointwise(DType::Float32)));
  }
  // A value held only at replay (not at recording) is still computed correctly.
  Tensor held;
  for (int i = 0; i < 4; ++i) {
    Tensor a = kiln::sin(x);
    Tensor s = kiln::sum(a);
    if (i == 3) held = a;
    (void)s.item<double>();
  }
  EXPECT_TRUE(all_close(held, map(read(x), [](double v) { return std::sin(v); }),
                        tol_pointwise(DType::Float32)));
}

TEST_F(TracerTest, OutputsOfEarlierReplaysAreNeverOverwritten) {
  Tensor x = random_tensor({8});
  std::vector<Tensor> outs;
  std::vector<Host> expected;
  for (int i = 0; i < 6; ++i) {
    Tensor xi = x * static_cast<double>(i);
    outs.push_back(kiln::exp(xi) + 1.0);
    expected.push_back(read(eager([&] { return kiln::exp(x * static_cast<double>(i)) + 1.0; })));
    (void)kiln::sum(outs.back()).item<double>();
  }
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(all_close(outs[i], expected[i], tol_pointwise(DType::Float32))) << i;
}

TEST_F(TracerTest, InPlaceUpdatesOfExternalTensorsAreWrittenBack) {
  // An SGD-like update traced as in-place writes into parameters the user holds.
  Tensor w = random_tensor({5, 3}), g = random_tensor({5, 3});
  Host hw = read(w);
  const Host hg = read(g);
  for (int step = 0; step < 6; ++step) {
    w.sub_(g * 0.1);
    w.mul_(0.9);
    hw = map2(hw, hg, [](double p, double q) {
      return static_cast<float>(static_cast<float>(p - static_cast<float>(q * 0.1)) * 0.9);
    });
    (void)kiln::sum(w).item<double>();
    EXPECT_TRUE(all_close(w, hw, Tol{1e-5, 1e-6})) << "step " << step;
  }
  EXPECT_EQ(count_traces(), 1u);
}

TEST_F(TracerTest, RandomOpsReplayWithFreshNumbers) {
  std::vector<Host> draws;
  kiln::manual_seed(123);
  for (int i = 0; i < 5; ++i) {
    Tensor r = kiln::rand({64}) * 2.0;
    draws.push_back(read(r));
  }
  for (int i = 1; i < 5; ++i)
    EXPECT_NE(draws[i].v, draws[i - 1].v) << "replay " << i << " repeated numbers";
  // The same seed gives the same numbers traced and eager.
  kiln::manual_seed(123);
  std::vector<Host> eager_draws;
  kiln::tracer::set_enabled(false);
  for (int i = 0; i < 5; ++i) eager_draws.push_back(read(kiln::rand({64}) * 2.0));
  kiln::tracer::set_enabled(true);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(all_close(draws[i], eager_draws[i], tol_exact())) << i;
}

TEST_F(TracerTest, GraphBreaksReportReasonAndSourceLine) {
  Tensor x = random_tensor({4});
  int item_line = 0, print_line = 0;
  for (int i = 0; i < 3; ++i) {
    Tensor y = kiln::exp(x);
    item_line = __LINE__ + 1;
    (void)kiln::sum(y).item<double>();
    Tensor z = kiln::cos(x) * 2.0;
    print_line = __LINE__ + 1;
    (void)z.str();
  }
  const auto* b = find_break("item()", item_line);
  ASSERT_NE(b, nullptr) << tr::explain().table();
  EXPECT_EQ(b->count, 3);
  EXPECT_NE(b->file.find("test_tracer.cpp"), std::string::npos);
  EXPECT_GE(b->eager_ms, 0.0);
  const auto* p = find_break("printing", print_line);
  ASSERT_NE(p, nullptr) << tr::explain().table();
  EXPECT_EQ(p->count, 3);
  // The JSON form carries the same facts.
  const std::string json = tr::explain().json();
  EXPECT_NE(json.find("\"line\": " + std::to_string(item_line)), std::string::npos) << json;
}

TEST_F(TracerTest, CopyToHostIsAGraphBreak) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Tensor x = random_tensor({16}).cuda();
  for (int i = 0; i < 3; ++i) {
    Tensor y = kiln::exp(x) + 1.0;
    Tensor host = y.cpu();
    EXPECT_TRUE(all_close(host, read(eager([&] { return kiln::exp(x) + 1.0; })),
                          tol_pointwise(DType::Float32)));
  }
  EXPECT_NE(find_break("copy to the host", 0), nullptr) << tr::explain().table();
}

TEST_F(TracerTest, FullgraphRaisesAtTheFirstBreak) {
  Tensor x = random_tensor({4});
  auto f = tr::compile(
      [](const Tensor& t) {
        Tensor y = kiln::exp(t);
        if (kiln::sum(y).item<double>() > 0) return y * 2.0;
        return y;
      },
      {"f", -1, true});
  try {
    f(x);
    FAIL() << "expected a GraphBreakError";
  } catch (const kiln::GraphBreakError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("item()"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_tracer.cpp"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'f'"), std::string::npos) << msg;
  }
  // The runtime keeps working, and without fullgraph the same code runs.
  auto g = tr::compile([](const Tensor& t) { return kiln::exp(t) * 2.0; }, {"g", -1, true});
  for (int i = 0; i < 3; ++i) {
    Tensor y = g(x);
    EXPECT_TRUE(all_close(y, map(read(x), [](double v) { return std::exp(v) * 2; }),
                          tol_pointwise(DType::Float32)));
  }
}

TEST_F(TracerTest, RecompileLimitLeavesTheTraceEager) {
  tr::config().recompile_limit = 2;
  tr::config().symbolic_shapes = false;  // each size a variant (symbolic_shapes.h)
  for (int n = 1; n <= 8; ++n) {
    for (int rep = 0; rep < 2; ++rep) {
      Tensor x = random_tensor({n});
      const Host expected = read(eager([&] { return pointwise_chain(x); }));
      Tensor y = pointwise_chain(x);
      (void)kiln::sum(y).item<double>();
      EXPECT_TRUE(all_close(y, expected, tol_pointwise(DType::Float32)));
    }
  }
  const auto report = tr::explain();
  ASSERT_EQ(report.eager_anchors.size(), 1u) << report.table();
  EXPECT_NE(report.eager_anchors[0].find("stays eager"), std::string::npos);
  EXPECT_LE(report.traces.size(), 3u);
}

TEST_F(TracerTest, NestedRegionsAreBoundaries) {
  Tensor x = random_tensor({6});
  auto reference = [&] {
    Tensor a = kiln::exp(x) * 2.0;
    Tensor c = kiln::sin(a) + 1.0;
    return c * a + 0.5;
  };
  for (int i = 0; i < 3; ++i) {
    tr::Region outer({"outer", -1, false});
    Tensor a = kiln::exp(x) * 2.0;
    Tensor c;
    {
      tr::Region inner({"inner", -1, false});
      c = kiln::sin(a) + 1.0;
    }
    Tensor d = c * a + 0.5;
    EXPECT_TRUE(all_close(d, read(eager(reference)), tol_pointwise(DType::Float32)));
  }
  EXPECT_EQ(count_traces(), 3u);  // before, inside and after the inner region
}

TEST_F(TracerTest, ASingleOpTraceStaysEager) {
  Tensor a = random_tensor({4}), b = random_tensor({4});
  Tensor c;
  for (int i = 0; i < 6; ++i) c = a + b;  // a one-op loop: nothing to fuse
  EXPECT_TRUE(all_close(c, map2(read(a), read(b), [](double p, double q) { return p + q; }),
                        tol_pointwise(DType::Float32)));
  EXPECT_EQ(count_traces(), 0u);
  // A longer loop after it still becomes hot.
  Tensor acc = kiln::zeros({4});
  for (int i = 0; i < 6; ++i) acc.add_(kiln::relu(a) * 2.0);
  EXPECT_GE(count_traces(), 1u) << tr::explain().table();
}

TEST_F(TracerTest, ExceptionInsideARegionLeavesTheRuntimeUsable) {
  Tensor x = random_tensor({5});
  Tensor kept;
  for (int i = 0; i < 4; ++i) {
    try {
      tr::Region region({"fails", -1, false});
      kept = kiln::exp(x) * 3.0;
      if (i >= 2) (void)kiln::matmul(x, random_tensor({4, 4}));  // shape error
    } catch (const kiln::ShapeError&) {
    }
    EXPECT_TRUE(all_close(kept, map(read(x), [](double v) { return std::exp(v) * 3; }),
                          tol_pointwise(DType::Float32)));
  }
  EXPECT_NE(find_break("exception", 0), nullptr) << tr::explain().table();
  Tensor after = kiln::relu(x);
  EXPECT_TRUE(all_close(after, map(read(x), [](double v) { return v > 0 ? v : 0; }), tol_exact()));
}

TEST_F(TracerTest, LoopWithoutSyncBecomesHot) {
  Tensor x = random_tensor({12});
  Tensor acc = kiln::zeros({12});
  for (int i = 0; i < 10; ++i) acc.add_(kiln::tanh(x) * 0.5);
  const Host expected = map(read(x), [](double v) {
    float a = 0;
    for (int i = 0; i < 10; ++i) a += static_cast<float>(std::tanh(static_cast<float>(v)) * 0.5f);
    return static_cast<double>(a);
  });
  EXPECT_TRUE(all_close(acc, expected, Tol{1e-5, 1e-6}));
  ASSERT_GE(count_traces(), 1u) << tr::explain().table();
  EXPECT_GT(tr::explain().traces[0].replays, 0);
}

TEST_F(TracerTest, MaxTraceLengthIsABreak) {
  tr::config().max_trace_length = 8;
  Tensor x = random_tensor({3});
  Tensor y = x;
  for (int i = 0; i < 20; ++i) y = y * 1.01 + 0.001;
  (void)kiln::sum(y).item<double>();
  EXPECT_NE(find_break("maximum length", 0), nullptr) << tr::explain().table();
  Tensor ref = eager([&] {
    Tensor z = x;
    for (int i = 0; i < 20; ++i) z = z * 1.01 + 0.001;
    return z;
  });
  EXPECT_TRUE(all_close(y, read(ref), tol_pointwise(DType::Float32)));
}

TEST_F(TracerTest, VerifyModeReplaysEagerlyToo) {
  tr::config().verify = true;
  Tensor x = random_tensor({20});
  for (int i = 0; i < 4; ++i) {
    Tensor y = kiln::gelu(x * 1.5, true);
    EXPECT_TRUE(all_close(y, read(eager([&] { return kiln::gelu(x * 1.5, true); })),
                          tol_pointwise(DType::Float32)));
  }
}

TEST_F(TracerTest, DisabledTracingRecordsNothing) {
  tr::set_enabled(false);
  Tensor x = random_tensor({4});
  for (int i = 0; i < 4; ++i) (void)kiln::sum(kiln::exp(x)).item<double>();
  EXPECT_EQ(count_traces(), 0u);
  EXPECT_EQ(tr::explain().ops_recorded, 0);
}

TEST_F(TracerTest, ErrorsStayEagerAndClear) {
  Tensor a = random_tensor({3, 4}), b = random_tensor({5, 6});
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(throws<kiln::ShapeError>([&] { (void)kiln::matmul(a, b); }, {"[matmul]"}));
    (void)kiln::sum(kiln::exp(a)).item<double>();
  }
}

}  // namespace
}  // namespace kt
