// The profiler: one event per eager op with the right names, replays with their ops
// nested inside, compile events, graph breaks at this file's lines, break costs that add
// up to the measured eager op time, and Chrome trace JSON that an independent parser
// (Python's json module) reads back with the same events, correctly nested.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tracer/profiler.h"
#include "tracer_util.h"

namespace kt {
namespace {

namespace tr = kiln::tracer;
namespace pf = kiln::profiler;
using kiln::Profile;

struct JsonEvent {
  std::string ph, cat, name;
  int pid = 0, tid = 0, line = 0;
  int64_t ts_ns = 0, dur_ns = 0;
};

// Writes the profile's Chrome trace, parses it with python3's json module and returns
// its events ("X" and "M"); fails the test when the file is not valid trace JSON.
std::vector<JsonEvent> chrome_events(const Profile& prof) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string stem = "kiln_profile_" +
                           std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string json = (dir / (stem + ".json")).string();
  const std::string out = (dir / (stem + ".tsv")).string();
  prof.export_chrome_trace(json);
  const std::string script =
      "import json,sys\n"
      "d=json.load(open(sys.argv[1]))\n"
      "ev=d['traceEvents']\n"
      "assert isinstance(ev,list)\n"
      "with open(sys.argv[2],'w') as f:\n"
      "  for e in ev:\n"
      "    assert e['ph'] in ('X','M'), e\n"
      "    a=e.get('args',{})\n"
      "    ts=round(float(e.get('ts',0))*1000); du=round(float(e.get('dur',0))*1000)\n"
      "    name=e['name'] if e['ph']=='X' else a['name']\n"
      "    f.write('\\t'.join([e['ph'],e.get('cat','-'),str(e['pid']),str(e['tid']),str(ts),"
      "str(du),str(a.get('line',0)),name.replace('\\t',' ')])+'\\n')\n";
  const std::string py = (dir / (stem + ".py")).string();
  std::ofstream(py) << script;
  const std::string cmd = "/usr/bin/python3 " + py + " " + json + " " + out;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "the Chrome trace is not valid JSON: " << json;
  std::vector<JsonEvent> events;
  std::ifstream in(out);
  std::string row;
  while (std::getline(in, row)) {
    std::istringstream fields(row);
    JsonEvent e;
    std::string pid, tid, ts, dur, line;
    std::getline(fields, e.ph, '\t');
    std::getline(fields, e.cat, '\t');
    std::getline(fields, pid, '\t');
    std::getline(fields, tid, '\t');
    std::getline(fields, ts, '\t');
    std::getline(fields, dur, '\t');
    std::getline(fields, line, '\t');
    std::getline(fields, e.name);
    e.pid = std::stoi(pid);
    e.tid = std::stoi(tid);
    e.ts_ns = std::stoll(ts);
    e.dur_ns = std::stoll(dur);
    e.line = std::stoi(line);
    events.push_back(e);
  }
  std::remove(json.c_str());
  std::remove(out.c_str());
  std::remove(py.c_str());
  return events;
}

std::vector<JsonEvent> on_track(const std::vector<JsonEvent>& all, int pid, int tid,
                                const std::string& cat = "") {
  std::vector<JsonEvent> out;
  for (const JsonEvent& e : all)
    if (e.ph == "X" && e.pid == pid && e.tid == tid && (cat.empty() || e.cat == cat))
      out.push_back(e);
  return out;
}

bool inside(const JsonEvent& child, const JsonEvent& parent) {
  return child.ts_ns >= parent.ts_ns && child.ts_ns + child.dur_ns <= parent.ts_ns + parent.dur_ns;
}

// Every two spans of a track are disjoint or one holds the other.
void expect_properly_nested(const std::vector<JsonEvent>& track) {
  for (size_t i = 0; i < track.size(); ++i) {
    for (size_t j = i + 1; j < track.size(); ++j) {
      const JsonEvent &a = track[i], &b = track[j];
      const bool disjoint = a.ts_ns + a.dur_ns <= b.ts_ns || b.ts_ns + b.dur_ns <= a.ts_ns;
      EXPECT_TRUE(disjoint || inside(a, b) || inside(b, a))
          << a.name << " [" << a.ts_ns << ", +" << a.dur_ns << "] overlaps " << b.name << " ["
          << b.ts_ns << ", +" << b.dur_ns << "]";
    }
  }
}

size_t count_kind(const Profile& p, pf::Kind kind, const std::string& name = "") {
  return static_cast<size_t>(std::count_if(p.events().begin(), p.events().end(), [&](auto& e) {
    return e.kind == kind && (name.empty() || e.name == name);
  }));
}

using ProfilerTest = TracerTest;

TEST_F(ProfilerTest, NoEventsWithoutAnActiveProfile) {
  EXPECT_EQ(pf::tls_active, nullptr);
  {
    Profile outer;
    EXPECT_EQ(pf::tls_active, &outer);
    {
      Profile inner;
      EXPECT_EQ(pf::tls_active, &inner);
    }
    EXPECT_EQ(pf::tls_active, &outer);
  }
  EXPECT_EQ(pf::tls_active, nullptr);
}

TEST_F(ProfilerTest, EagerLoopGivesOneEventPerOp) {
  tr::set_enabled(false);
  Tensor x = random_tensor({64});
  constexpr int kN = 25;
  Profile prof;
  for (int i = 0; i < kN; ++i) {
    Tensor y = kiln::relu(x);
    Tensor z = kiln::exp(y);
  }
  prof.stop();
  EXPECT_EQ(count_kind(prof, pf::Kind::Op, "relu"), static_cast<size_t>(kN));
  EXPECT_EQ(count_kind(prof, pf::Kind::Op, "exp"), static_cast<size_t>(kN));
  EXPECT_EQ(prof.events().size(), static_cast<size_t>(2 * kN));
  for (const pf::Event& e : prof.events()) {
    EXPECT_EQ(e.device, "cpu");
    EXPECT_GE(e.end_ns, e.start_ns);
    EXPECT_LE(e.end_ns / 1e6, prof.wall_ms());
  }
  // Ops after stop() are not recorded.
  (void)kiln::relu(x);
  EXPECT_EQ(prof.events().size(), static_cast<size_t>(2 * kN));

  const std::string table = prof.table("count");
  EXPECT_NE(table.find("relu"), std::string::npos) << table;
  EXPECT_NE(table.find(" 25 "), std::string::npos) << table;
  const std::string by_name = prof.table("name");
  EXPECT_LT(by_name.find("exp"), by_name.find("relu")) << by_name;
  EXPECT_THROW((void)prof.table("bogus"), kiln::ValueError);

  const auto events = chrome_events(prof);
  const auto ops = on_track(events, 1, 1, "op");
  EXPECT_EQ(ops.size(), static_cast<size_t>(2 * kN));
  EXPECT_EQ(std::count_if(ops.begin(), ops.end(), [](auto& e) { return e.name == "relu"; }), kN);
  bool named_cpu_track = false;
  for (const JsonEvent& e : events)
    named_cpu_track |= e.ph == "M" && e.pid == 1 && e.tid == 1 && e.name == "CPU ops";
  EXPECT_TRUE(named_cpu_track);
}

// A hot loop: exp -> mul -> add -> sum, read with item() (a boundary each iteration).
void hot_loop(const Tensor& x, int iterations, int* item_line) {
  for (int i = 0; i < iterations; ++i) {
    Tensor y = kiln::exp(x) * 2.0 + 1.0;
    *item_line = __LINE__ + 1;
    (void)kiln::sum(y).item<double>();
  }
}

TEST_F(ProfilerTest, ReplaysNestTheirOpsAndCompilesAreRecorded) {
  tr::config().jit = false;  // the interpreting backend: a replay runs the eager ops
  Tensor x = random_tensor({128});
  int item_line = 0;
  Profile prof;
  hot_loop(x, 6, &item_line);
  prof.stop();
  const auto report = tr::explain();
  ASSERT_EQ(report.traces.size(), 1u) << report.table();
  const int id = report.traces[0].id;
  EXPECT_EQ(count_kind(prof, pf::Kind::Compile, "compile trace " + std::to_string(id)), 1u);
  const size_t replays = count_kind(prof, pf::Kind::Replay, "replay trace " + std::to_string(id));
  EXPECT_EQ(replays, static_cast<size_t>(report.traces[0].replays));
  EXPECT_GE(replays, 3u);
  for (const pf::Event& e : prof.events()) {
    if (e.kind != pf::Kind::Replay) continue;
    EXPECT_EQ(e.trace_id, id);
    EXPECT_EQ(e.backend, "interpreter");
    EXPECT_EQ(e.ops, 4);
    EXPECT_EQ(e.kernels, 4);
  }
  EXPECT_GT(prof.replay_ns_per_op(), 0);

  const auto events = chrome_events(prof);
  const auto host = on_track(events, 1, 1);
  expect_properly_nested(host);
  size_t replay_spans = 0;
  for (const JsonEvent& r : host) {
    if (r.cat != "replay") continue;
    ++replay_spans;
    std::vector<std::string> children;
    for (const JsonEvent& o : host)
      if (o.cat == "op" && inside(o, r)) children.push_back(o.name);
    EXPECT_EQ(children, (std::vector<std::string>{"exp", "mul", "add", "sum"})) << r.name;
  }
  EXPECT_EQ(replay_spans, replays);
  // The replays lane holds the tracer's spans only.
  const auto lane = on_track(events, 1, 2);
  EXPECT_FALSE(lane.empty());
  for (const JsonEvent& e : lane) EXPECT_NE(e.cat, "op");
}

TEST_F(ProfilerTest, ReplaysWithTheDefaultBackend) {
  Tensor x = random_tensor({128});
  int item_line = 0;
  Profile prof;
  hot_loop(x, 6, &item_line);
  prof.stop();
  const auto report = tr::explain();
  ASSERT_EQ(report.traces.size(), 1u) << report.table();
  size_t replays = 0;
  for (const pf::Event& e : prof.events()) {
    if (e.kind != pf::Kind::Replay) continue;
    ++replays;
    EXPECT_EQ(e.backend, report.traces[0].backend);
    EXPECT_EQ(e.kernels, report.traces[0].kernels);
  }
  EXPECT_EQ(replays, static_cast<size_t>(report.traces[0].replays));
  const auto host = on_track(chrome_events(prof), 1, 1);
  expect_properly_nested(host);
  if (report.traces[0].backend == "llvm") {  // fused kernels lie inside their replays
    size_t kernels = 0;
    for (const JsonEvent& k : host) {
      if (k.cat != "kernel") continue;
      ++kernels;
      EXPECT_EQ(k.name.rfind("llvm kernel ", 0), 0u) << k.name;
      EXPECT_TRUE(std::any_of(host.begin(), host.end(), [&](const JsonEvent& r) {
        return r.cat == "replay" && inside(k, r);
      })) << k.name;
    }
    EXPECT_GE(kernels, replays);
  }
}

TEST_F(ProfilerTest, GraphBreakEventsNameThisFileAndLine) {
  Tensor x = random_tensor({32});
  int item_line = 0;
  Profile prof;
  hot_loop(x, 3, &item_line);
  prof.stop();
  size_t breaks = 0;
  for (const pf::Event& e : prof.events()) {
    if (e.kind != pf::Kind::GraphBreak) continue;
    ++breaks;
    EXPECT_NE(e.reason.find("item()"), std::string::npos) << e.reason;
    EXPECT_NE(e.file.find("test_profiler.cpp"), std::string::npos) << e.file;
    EXPECT_EQ(e.line, item_line);
    EXPECT_NE(e.name.find("test_profiler.cpp:" + std::to_string(item_line)), std::string::npos)
        << e.name;
  }
  EXPECT_EQ(breaks, 3u);
  const auto costs = prof.break_costs();
  ASSERT_EQ(costs.size(), 1u);
  EXPECT_EQ(costs[0].count, 3);
  EXPECT_EQ(costs[0].line, item_line);
  const auto events = chrome_events(prof);
  size_t json_breaks = 0;
  for (const JsonEvent& e : on_track(events, 1, 1, "graph_break")) {
    ++json_breaks;
    EXPECT_EQ(e.line, item_line);
  }
  EXPECT_EQ(json_breaks, 3u);
  EXPECT_NE(prof.table().find("Graph break costs"), std::string::npos);
}

TEST_F(ProfilerTest, BreakCostsAddUpToTheMeasuredEagerTime) {
  tr::config().warmup = 1000;  // nothing compiles: every segment runs eagerly
  Tensor x = random_tensor({256, 256});
  constexpr int kIters = 8;
  int item_line = 0;
  const auto t0 = std::chrono::steady_clock::now();
  Profile prof;
  hot_loop(x, kIters, &item_line);
  prof.stop();
  const double outside_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The tracer's clock wraps each recorded op's eager run (Tracer::record_op), and the
  // op's profiler span is inside it. Only the clocks' nesting is compared, never a ratio
  // of durations: a loaded machine (the CI sanitizer run) preempts anywhere, and a margin
  // on durations failed there (other ops, item()'s copy to the host, were counted too).
  double op_ms = 0;
  int ops = 0;
  for (const pf::Event& e : prof.events()) {
    if (e.kind != pf::Kind::Op) continue;
    if (e.name != "exp" && e.name != "mul" && e.name != "add" && e.name != "sum") continue;
    op_ms += e.ms();
    ++ops;
  }
  const auto costs = prof.break_costs();
  ASSERT_EQ(costs.size(), 1u);
  const pf::BreakCost& b = costs[0];
  EXPECT_EQ(b.count, kIters);
  EXPECT_EQ(b.eager_ops, 4 * kIters);  // exp mul add sum, every iteration
  EXPECT_EQ(ops, 4 * kIters);
  EXPECT_GE(b.eager_ms, op_ms - 1e-6) << "ops " << op_ms;
  EXPECT_LE(b.eager_ms, outside_ms);
  EXPECT_LT(b.est_saving_ms, 0);  // no replay measured: no basis for an estimate
  // explain() prices the same break the same way.
  const auto report = tr::explain();
  ASSERT_EQ(report.breaks.size(), 1u);
  EXPECT_NEAR(report.breaks[0].eager_ms, b.eager_ms, 1e-6);
  EXPECT_EQ(report.breaks[0].eager_ops, b.eager_ops);
}

TEST_F(ProfilerTest, SavingEstimateUsesTheMeasuredReplayCost) {
  tr::config().jit = false;
  Tensor x = random_tensor({256, 256});
  int item_line = 0;
  Profile prof;
  hot_loop(x, 6, &item_line);  // two eager warmup segments, then replays
  prof.stop();
  const auto costs = prof.break_costs();
  ASSERT_EQ(costs.size(), 1u);
  const double per_op = prof.replay_ns_per_op();
  ASSERT_GT(per_op, 0);
  const double expected = std::max(0.0, costs[0].eager_ms - costs[0].eager_ops * per_op / 1e6);
  EXPECT_NEAR(costs[0].est_saving_ms, expected, 1e-9);
  EXPECT_LE(costs[0].est_saving_ms, costs[0].eager_ms);
  EXPECT_EQ(costs[0].eager_ops, 8);  // the two warmup iterations ran eagerly
  const auto report = tr::explain();
  ASSERT_EQ(report.breaks.size(), 1u);
  EXPECT_GE(report.breaks[0].est_saving_ms, 0);
  EXPECT_NE(report.table().find("est_save_ms"), std::string::npos) << report.table();
  EXPECT_NE(report.json().find("\"est_saving_ms\": "), std::string::npos) << report.json();
}

TEST_F(ProfilerTest, CudaOpsGetGpuSpans) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  tr::set_enabled(false);
  Tensor x = random_tensor({1 << 16}).cuda();
  Profile prof;
  for (int i = 0; i < 10; ++i) (void)kiln::exp(x);
  prof.stop();
  ASSERT_EQ(count_kind(prof, pf::Kind::Op, "exp"), 10u);
  for (const pf::Event& e : prof.events()) {
    EXPECT_EQ(e.device, "cuda:0");
    EXPECT_GE(e.gpu_start_ns, 0);
    EXPECT_GE(e.gpu_end_ns, e.gpu_start_ns);
  }
  const auto events = chrome_events(prof);
  EXPECT_EQ(on_track(events, 2, 100).size(), 10u);
}

}  // namespace
}  // namespace kt
