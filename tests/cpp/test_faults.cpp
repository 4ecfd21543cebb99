// Faults (issue 9): each one gives a clear error or a clean fallback, and the runtime
// keeps working afterwards (every test ends by running a small traced op sequence and
// checking its values).
//
//   fault                                         expected
//   out of memory in an eager op                  OutOfMemoryError naming the size
//   out of memory inside a CPU replay             OutOfMemoryError; earlier outputs intact;
//                                                 the value it owed is a clear error
//   (CUDA: test_jit_cuda.cpp OutOfMemoryInATracedLoopAndTheRuntimeAfterIt)
//   LLVM compile failure (KILN_LLVM_JIT_FAIL)     eager kernels, noted in explain()
//   (NVRTC: test_jit_cuda.cpp CompileFailureFallsBackToEagerKernels)
//   corrupt / truncated / foreign cache files     ignored (test_jit_cpu.cpp covers a flipped
//                                                 payload byte and a half file through the JIT)
//   cache directory of another user / writable    the disk cache is off, with the reason;
//   by others                                     the JIT compiles and writes nothing there
//   a full disk while writing the cache           the write fails quietly, no partial files;
//                                                 the JIT compiles and runs
//   a user exception in the middle of a step      same results as eager with the same throws
//   threads training at once                      each equal to the same loop run alone
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "jit/kernel_cache.h"
#include "ops/api.h"
#include "ops/losses.h"
#include "ops/optim/optimizer.h"
#include "run_modes.h"
#include "tracer_util.h"
#ifdef KILN_WITH_LLVM
#include "jit/llvm/llvm_jit.h"
#endif

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;
namespace fs = std::filesystem;

namespace {

class Faults : public TracerTest {
 protected:
  void SetUp() override {
    TracerTest::SetUp();
    tr::config().jit = true;
  }
};

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The process's address space (VmSize), in bytes.
size_t vm_size() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmSize:", 0) == 0) return std::strtoull(line.c_str() + 7, nullptr, 10) * 1024;
  return 0;
}

// Caps the address space at what is mapped now plus `extra` bytes (RLIMIT_AS): a real
// allocation failure, whatever the machine's memory and overcommit settings.
class AddressLimit {
 public:
  explicit AddressLimit(size_t extra) {
    getrlimit(RLIMIT_AS, &saved_);
    struct rlimit lim = saved_;
    lim.rlim_cur = vm_size() + extra;
    if (saved_.rlim_max != RLIM_INFINITY && lim.rlim_cur > saved_.rlim_max)
      lim.rlim_cur = saved_.rlim_max;
    setrlimit(RLIMIT_AS, &lim);
  }
  ~AddressLimit() { setrlimit(RLIMIT_AS, &saved_); }
  AddressLimit(const AddressLimit&) = delete;
  AddressLimit& operator=(const AddressLimit&) = delete;

 private:
  struct rlimit saved_;
};

std::string temp_dir(const std::string& what) {
  const std::string d =
      fs::temp_directory_path().string() + "/kiln-faults-" + what + "-" + std::to_string(getpid());
  fs::remove_all(d);
  return d;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

// Runs FaultsChild.<test> in a new process (the JIT reads KILN_CACHE_DIR once per
// process) with that cache dir and extra environment ("NAME=value ..."); returns the
// file it wrote.
std::string run_child_test(const std::string& test, const std::string& cache_dir,
                           const std::string& env, int* status) {
  const std::string out = temp_dir("child-out");
  // KILN_COMPILE_SYNC=1: the child counts compiles and replays after a few iterations.
  const std::string cmd = env + " KILN_COMPILE_SYNC=1 KILN_CACHE_DIR='" + cache_dir +
                          "' KILN_FAULTS_CHILD_OUT='" + out + "' '" +
                          fs::read_symlink("/proc/self/exe").string() +
                          "' --gtest_filter=FaultsChild." + test + " > /dev/null 2>&1";
  *status = std::system(cmd.c_str());
  const std::string text = slurp(out);
  fs::remove(out);
  return text;
}

// After every fault: a small traced op sequence (compiled, replayed) gives right values.
void expect_runtime_works() {
  SCOPED_TRACE("the runtime after the fault");
  tr::reset();
  const Tensor x = random_tensor({33, 17});
  const Host xh = read(x);
  Tensor y;
  for (int i = 0; i < 4; ++i) {
    tr::Region region({"after the fault"});
    y = kiln::softmax(kiln::relu(x) * 1.5 + 0.25, -1);
  }
  const Host got = read(y);
  for (int64_t r = 0; r < 33; ++r) {
    double total = 0;
    std::vector<double> e(17);
    for (int64_t c = 0; c < 17; ++c) {
      e[static_cast<size_t>(c)] =
          std::exp(std::max(xh.v[static_cast<size_t>(r * 17 + c)], 0.0) * 1.5 + 0.25);
      total += e[static_cast<size_t>(c)];
    }
    for (int64_t c = 0; c < 17; ++c)
      ASSERT_NEAR(got.v[static_cast<size_t>(r * 17 + c)], e[static_cast<size_t>(c)] / total, 1e-6);
  }
  const tr::ExplainReport rep = tr::explain();
  ASSERT_EQ(rep.traces.size(), 1u) << rep.table();
  EXPECT_GE(rep.traces[0].replays, 1) << rep.table();
  tr::reset();
}

// ---------------------------------------------------------------- out of memory

TEST_F(Faults, OutOfMemoryInAnEagerOp) {
  const Tensor x = random_tensor({64});
  std::string error;
  {
    AddressLimit limit(size_t{256} << 20);
    try {
      // 1 GiB of float32 on the host, recorded by the tracer (tracing is on).
      Tensor big = kiln::full({int64_t{1} << 28}, 1.0);
      Tensor y = big * 2.0;
      (void)y;
    } catch (const kiln::OutOfMemoryError& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("out of memory"), std::string::npos) << error;
  EXPECT_NE(error.find("1073741824"), std::string::npos) << "the size asked for: " << error;
  // The walk the error cut short does not hold the thread in a trace.
  Tensor z = kiln::exp(x);
  EXPECT_TRUE(all_close(z, map(read(x), [](double v) { return std::exp(v); }),
                        tol_pointwise(DType::Float32)));
  expect_runtime_works();
}

TEST_F(Faults, OutOfMemoryInsideACpuReplay) {
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM";
#else
  // Every call returns a new 16 MiB tensor (broadcasting two small inputs) and the
  // caller keeps them all: the address space runs out after some calls, in a replay.
  const int64_t n = 2048;
  const Tensor col = random_tensor({n, 1}), row = random_tensor({1, n});
  const Host ch = read(col), rh = read(row);
  auto f = [&](double s) { return col * s + row; };
  auto sample_ok = [&](const Tensor& y, double s) {
    const Host got = read(y.slice(0, 0, n, 257));
    for (int64_t r = 0; r < got.sizes[0]; ++r)
      for (int64_t j = 0; j < n; j += 97) {
        const double want = ch.v[static_cast<size_t>(r * 257)] * s + rh.v[static_cast<size_t>(j)];
        if (std::abs(got.v[static_cast<size_t>(r * n + j)] - want) > 1e-5) return false;
      }
    return true;
  };
  std::vector<Tensor> kept;
  std::vector<double> scales;
  std::string error;
  Tensor failed;  // the value the failing replay owed
  {
    AddressLimit limit(size_t{320} << 20);
    for (int i = 0; i < 200 && error.empty(); ++i) {
      const double s = 0.5 + 0.25 * i;
      try {
        {
          tr::Region region({"oom"});
          failed = f(s);
        }  // the replay runs here at the latest
        kept.push_back(failed);
        scales.push_back(s);
      } catch (const kiln::OutOfMemoryError& e) {
        error = e.what();
      }
    }
  }
  ASSERT_FALSE(error.empty()) << "no OutOfMemoryError after " << kept.size() << " x 16 MiB";
  EXPECT_NE(error.find("out of memory"), std::string::npos) << error;
  ASSERT_GE(kept.size(), 3u) << "the error should come in a replay, not while recording";
  {
    const tr::ExplainReport r = tr::explain();
    ASSERT_EQ(r.traces.size(), 1u) << r.table();
    EXPECT_EQ(r.traces[0].backend, "llvm") << r.table();
    EXPECT_GE(r.traces[0].replays, 1) << r.table();
  }
  // What earlier calls handed out is intact.
  EXPECT_TRUE(sample_ok(kept.front(), scales.front()));
  EXPECT_TRUE(sample_ok(kept.back(), scales.back()));
  // The value the failed replay owed is a clear error to read, never a crash.
  EXPECT_TRUE(failed.is_lazy());
  EXPECT_TRUE(throws<kiln::Error>([&] { (void)read(failed); }, {"unavailable"}));
  EXPECT_TRUE(
      throws<kiln::Error>([&] { (void)kiln::sum(failed).item<double>(); }, {"unavailable"}));
  failed = Tensor();
  kept.clear();
  // The same trace replays again once there is memory.
  Tensor y;
  {
    tr::Region region({"oom"});
    y = f(-1.5);
  }
  EXPECT_TRUE(sample_ok(y, -1.5));
  // The region the error left ended with it: tracing off, nothing is recorded.
  const int64_t recorded = tr::explain().ops_recorded;
  tr::set_enabled(false);
  (void)kiln::exp(col * 2.0);
  tr::set_enabled(true);
  EXPECT_EQ(tr::explain().ops_recorded, recorded) << "a region stayed open after the error";
  expect_runtime_works();
#endif
}

// ---------------------------------------------------------------- compile failure

// A chain no other test compiles, and its expected values.
Tensor jit_fail_chain(const Tensor& x) {
  return kiln::sigmoid(kiln::abs(x) * 1.375 + 0.0625) * kiln::cos(x * 0.8125);
}
double jit_fail_ref(double v) {
  return 1 / (1 + std::exp(-(std::abs(v) * 1.375 + 0.0625))) * std::cos(v * 0.8125);
}

// Only meaningful as a child of LlvmCompileFailureFallsBackToEagerKernels (compiles
// refused, no disk cache): writes "ok|wrong kernels replays" and the trace's notes.
TEST(FaultsChild, CompileFailure) {
  const char* out = std::getenv("KILN_FAULTS_CHILD_OUT");
  if (!out) GTEST_SKIP() << "runs as a child process of the compile failure test";
  tr::reset();
  tr::config().warmup = 2;
  const Tensor x = random_tensor({129, 7});
  Tensor y;
  for (int i = 0; i < 4; ++i) {
    tr::Region region({"jit fails"});
    y = jit_fail_chain(x);
  }
  const bool ok = all_close(y, map(read(x), jit_fail_ref), tol_pointwise(DType::Float32));
  const tr::ExplainReport r = tr::explain();
  std::ofstream f(out);
  f << (ok ? "ok" : "wrong") << " " << (r.traces.empty() ? -1 : r.traces[0].kernels) << " "
    << (r.traces.empty() ? -1 : r.traces[0].replays) << "\n";
  for (const auto& t : r.traces)
    for (const std::string& n : t.notes) f << n << "\n";
}

TEST_F(Faults, LlvmCompileFailureFallsBackToEagerKernels) {
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM";
#else
  // In a process of its own: no disk cache, nothing in memory, every compile refused.
  int status = -1;
  const std::string text = run_child_test("CompileFailure", "off", "KILN_LLVM_JIT_FAIL=1", &status);
  ASSERT_EQ(status, 0) << text;
  std::istringstream in(text);
  std::string verdict;
  int kernels = -2, replays = -2;
  in >> verdict >> kernels >> replays;
  EXPECT_EQ(verdict, "ok") << text;  // eager kernels: the right values
  EXPECT_GE(kernels, 2) << text;     // the ops' eager kernels, one by one
  EXPECT_GE(replays, 1) << text;     // the trace still replays (its steps eagerly)
  EXPECT_NE(text.find("fell back to eager kernels"), std::string::npos) << text;
  EXPECT_NE(text.find("KILN_LLVM_JIT_FAIL"), std::string::npos) << text;
  // Here, without the fault, the same code compiles to a fused kernel.
  const Tensor x = random_tensor({129, 7});
  Tensor y;
  for (int i = 0; i < 4; ++i) {
    tr::Region region({"jit works"});
    y = jit_fail_chain(x);
  }
  EXPECT_TRUE(all_close(y, map(read(x), jit_fail_ref), tol_pointwise(DType::Float32)));
  const tr::ExplainReport r = tr::explain();
  ASSERT_EQ(r.traces.size(), 1u) << r.table();
  EXPECT_EQ(r.traces[0].kernels, 1) << r.table();  // one fused kernel instead
  EXPECT_TRUE(r.traces[0].notes.empty()) << r.table();
  expect_runtime_works();
#endif
}

// ---------------------------------------------------------------- the disk cache

// Damaged files the JIT test does not make: empty, cut inside the header, a key that is
// not the file's, a symlink. Each is ignored (counted as rejected) and the next store
// replaces it.
TEST_F(Faults, DiskCacheFilesEmptyCutForeignOrSymlinkedAreIgnored) {
  const std::string dir = temp_dir("files");
  ScopedEnv env("KILN_CACHE_DIR", dir);
  kiln::jit::KernelCache cache("cpu");
  ASSERT_TRUE(cache.enabled()) << cache.disabled_reason();
  const std::string payload(3000, 'p');
  cache.store("k1", payload);
  cache.store("k2", "other payload");
  const std::string good = slurp(cache.path_for("k1"));
  ASSERT_GT(good.size(), payload.size());
  struct Damage {
    const char* name;
    std::function<void()> make;
  };
  const std::vector<Damage> damages = {
      {"empty", [&] { write_file(cache.path_for("k1"), ""); }},
      {"cut in the header", [&] { write_file(cache.path_for("k1"), good.substr(0, 12)); }},
      {"cut after the key", [&] { write_file(cache.path_for("k1"), good.substr(0, 30)); }},
      {"one byte short",
       [&] { write_file(cache.path_for("k1"), good.substr(0, good.size() - 1)); }},
      {"one byte more", [&] { write_file(cache.path_for("k1"), good + "x"); }},
      {"another key's file",
       [&] { write_file(cache.path_for("k1"), slurp(cache.path_for("k2"))); }},
      {"a symlink to a good file",
       [&] {
         fs::copy_file(cache.path_for("k1"), dir + "/cpu/elsewhere",
                       fs::copy_options::overwrite_existing);
         fs::remove(cache.path_for("k1"));
         fs::create_symlink(dir + "/cpu/elsewhere", cache.path_for("k1"));
       }},
      {"a directory", [&] {
         fs::remove(cache.path_for("k1"));
         fs::create_directory(cache.path_for("k1"));
       }}};
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    fs::remove_all(cache.path_for("k1"));
    cache.store("k1", payload);
    ASSERT_EQ(cache.load("k1").value_or(""), payload);
    d.make();
    const int64_t rejected = cache.stats().rejected, misses = cache.stats().misses;
    EXPECT_FALSE(cache.load("k1").has_value());
    EXPECT_EQ(cache.stats().rejected + cache.stats().misses, rejected + misses + 1);
    if (std::string(d.name) != "a directory") {
      cache.store("k1", payload);  // the recompiled kernel replaces it
      EXPECT_EQ(cache.load("k1").value_or(""), payload);
    }
  }
  fs::remove_all(dir);
}

[[maybe_unused]] bool running_as_root() { return geteuid() == 0; }

// Only meaningful as a child of the tests below: a traced loop (whose LLVM kernel is new
// to the process) under KILN_CACHE_DIR; writes "compiled disk_hits value" to the file.
TEST(FaultsChild, TracedLoopWithTheCacheDir) {
  const char* out = std::getenv("KILN_FAULTS_CHILD_OUT");
  if (!out) GTEST_SKIP() << "runs as a child process of the cache fault tests";
#ifdef KILN_WITH_LLVM
  tr::reset();
  tr::config().warmup = 2;
  const Tensor x = make(Host({40, 24}, std::vector<double>(40 * 24, 0.75)), DType::Float32);
  Tensor y;
  for (int i = 0; i < 4; ++i) {
    tr::Region region;
    y = kiln::tanh(x * 1.25) + kiln::sqrt(x) * 0.5;
  }
  const auto s = kiln::jit::llvm_backend::LlvmJit::instance().stats();
  std::ofstream(out) << std::setprecision(17) << s.compiled << " " << s.disk_hits << " "
                     << read(y).v[0] << " " << tr::explain().traces.size() << "\n"
                     << kiln::jit::llvm_backend::LlvmJit::instance().cache_dir() << "\n";
#endif
}

struct ChildResult {
  int status = -1;
  long compiled = -1, hits = -1;
  double value = 0;
  long traces = 0;
  std::string cache;
};

[[maybe_unused]] ChildResult run_child(const std::string& cache_dir) {
  ChildResult r;
  std::istringstream in(run_child_test("TracedLoopWithTheCacheDir", cache_dir, "", &r.status));
  in >> r.compiled >> r.hits >> r.value >> r.traces;
  std::getline(in >> std::ws, r.cache);
  return r;
}

const double kChildValue = std::tanh(0.75 * 1.25) + std::sqrt(0.75) * 0.5;

TEST_F(Faults, CacheDirectoryOfAnotherUserOrWritableByOthersIsNotUsed) {
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM";
#else
  if (!running_as_root()) GTEST_SKIP() << "needs root to give a directory to another user";
  const uid_t nobody = 65534;
  struct Case {
    const char* name;
    std::function<void(const std::string&)> make;
  };
  const std::vector<Case> cases = {
      {"root dir owned by nobody",
       [&](const std::string& d) { ASSERT_EQ(chown(d.c_str(), nobody, nobody), 0); }},
      {"cpu dir owned by nobody",
       [&](const std::string& d) { ASSERT_EQ(chown((d + "/cpu").c_str(), nobody, nobody), 0); }},
      {"root dir writable by others",
       [&](const std::string& d) { ASSERT_EQ(chmod(d.c_str(), 0707), 0); }},
      {"cpu dir writable by group",
       [&](const std::string& d) { ASSERT_EQ(chmod((d + "/cpu").c_str(), 0770), 0); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = temp_dir("owner");
    {
      ScopedEnv env("KILN_CACHE_DIR", dir);
      kiln::jit::KernelCache made("cpu");  // creates dir and dir/cpu, private
      ASSERT_TRUE(made.enabled()) << made.disabled_reason();
    }
    c.make(dir);
    {
      ScopedEnv env("KILN_CACHE_DIR", dir);
      kiln::jit::KernelCache cache("cpu");
      EXPECT_FALSE(cache.enabled());
      EXPECT_NE(cache.disabled_reason().find("not trusted"), std::string::npos)
          << cache.disabled_reason();
      cache.store("k", "payload");  // a no-op, not a crash
      EXPECT_FALSE(cache.load("k").has_value());
    }
    // A process whose cache is that directory: compiles, runs right, writes nothing there.
    const ChildResult r = run_child(dir);
    EXPECT_EQ(r.status, 0);
    EXPECT_GE(r.compiled, 1);
    EXPECT_EQ(r.hits, 0);
    EXPECT_NEAR(r.value, kChildValue, 1e-6);
    EXPECT_EQ(r.traces, 1);
    EXPECT_NE(r.cache.find("not trusted"), std::string::npos) << r.cache;
    EXPECT_TRUE(fs::is_empty(dir + "/cpu")) << "the JIT wrote into an untrusted directory";
    fs::remove_all(dir);
  }
  // A file of another user inside a trusted directory is not loaded.
  const std::string dir = temp_dir("owner-file");
  ScopedEnv env("KILN_CACHE_DIR", dir);
  kiln::jit::KernelCache cache("cpu");
  cache.store("k", "payload");
  ASSERT_TRUE(cache.load("k").has_value());
  ASSERT_EQ(chown(cache.path_for("k").c_str(), nobody, nobody), 0);
  EXPECT_FALSE(cache.load("k").has_value());
  fs::remove_all(dir);
  expect_runtime_works();
#endif
}

// No partial file and no temporary left behind; returns the names in dir.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

TEST_F(Faults, FullDiskWhileWritingTheCacheFileSizeLimit) {
  // RLIMIT_FSIZE: writes past 4 KiB fail with EFBIG (SIGXFSZ ignored), as on a full disk.
  const std::string dir = temp_dir("fsize");
  ScopedEnv env("KILN_CACHE_DIR", dir);
  kiln::jit::KernelCache cache("cpu");
  ASSERT_TRUE(cache.enabled()) << cache.disabled_reason();
  struct rlimit saved;
  getrlimit(RLIMIT_FSIZE, &saved);
  struct sigaction ignore = {}, old = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &old);
  struct rlimit lim = saved;
  lim.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  cache.store("big", std::string(64 * 1024, 'b'));
  cache.store("small", "fits");
  setrlimit(RLIMIT_FSIZE, &saved);
  sigaction(SIGXFSZ, &old, nullptr);
  EXPECT_EQ(cache.stats().write_failures, 1);
  EXPECT_FALSE(cache.load("big").has_value());
  EXPECT_EQ(cache.load("small").value_or(""), "fits");
  EXPECT_EQ(listing(dir + "/cpu"), std::vector<std::string>{"small.bin"});
  fs::remove_all(dir);
  expect_runtime_works();
}

TEST_F(Faults, FullDiskWhileWritingTheCacheTmpfs) {
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM";
#else
  // A real full file system: a 64 KiB tmpfs (needs the right to mount: root in most
  // containers), filled up but for a few KiB.
  const std::string mnt = temp_dir("tmpfs");
  fs::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k,mode=0700") != 0) {
    const std::string why = std::strerror(errno);
    fs::remove_all(mnt);
    GTEST_SKIP() << "cannot mount a tmpfs here: " << why;
  }
  struct Unmount {
    std::string path;
    ~Unmount() {
      umount2(path.c_str(), MNT_DETACH);
      fs::remove_all(path);
    }
  } unmount{mnt};
  const std::string dir = mnt + "/cache";
  {
    ScopedEnv env("KILN_CACHE_DIR", dir);
    kiln::jit::KernelCache cache("cpu");
    ASSERT_TRUE(cache.enabled()) << cache.disabled_reason();
    {
      std::ofstream filler(mnt + "/filler", std::ios::binary);
      const std::string chunk(1024, 'f');
      for (int i = 0; i < 64 && filler; ++i) filler << chunk;
    }
    fs::resize_file(mnt + "/filler", fs::file_size(mnt + "/filler") - 12 * 1024);
    cache.store("big", std::string(32 * 1024, 'b'));
    EXPECT_EQ(cache.stats().write_failures, 1);
    EXPECT_FALSE(cache.load("big").has_value());
    EXPECT_TRUE(listing(dir + "/cpu").empty()) << "a partial file was left behind";
    cache.store("small", "fits");
    EXPECT_EQ(cache.load("small").value_or(""), "fits");
    fs::remove(cache.path_for("small"));
  }
  // The whole disk full: a process caching there compiles, runs right, leaves nothing.
  fs::resize_file(mnt + "/filler", 0);
  {
    std::ofstream filler(mnt + "/filler", std::ios::binary);
    const std::string chunk(1024, 'f');
    for (int i = 0; i < 128 && filler; ++i) filler << chunk;
  }
  const ChildResult r = run_child(dir);
  EXPECT_EQ(r.status, 0);
  EXPECT_GE(r.compiled, 1);
  EXPECT_NEAR(r.value, kChildValue, 1e-6);
  EXPECT_EQ(r.traces, 1);
  EXPECT_TRUE(listing(dir + "/cpu").empty()) << "a partial file was left behind";
  expect_runtime_works();
#endif
}

// ---------------------------------------------------------------- user exceptions

struct StepResult {
  std::vector<double> losses;
  std::vector<Host> params;
  tr::ExplainReport report;
};

// Deterministic inputs of a small classifier (no global generator).
Host pattern_host(const Dims& sizes, uint64_t seed, double scale) {
  Host h(sizes);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (double& v : h.v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = (static_cast<double>(x >> 11) / 9007199254740992.0 - 0.5) * 2 * scale;
  }
  return h;
}

struct UserFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Training steps of linear-relu-linear + cross_entropy with Adam; `throw_at(step)` says
// where user code throws in that step (0: nowhere, 1: after the forward pass, 2: after
// backward, before the optimizer step). The loop catches and goes on. With `region`,
// each step is a compile()d function instead of an auto-traced loop body.
// Runs on this thread's tracer as it is set up (enabled or not).
StepResult train_here(int steps, uint64_t seed, const std::function<int(int)>& throw_at,
                      bool region) {
  const int64_t batch = 24, in = 12, hidden = 32, classes = 5;
  std::vector<Tensor> params = {
      make(pattern_host({hidden, in}, seed + 1, 0.3), DType::Float32),
      make(pattern_host({hidden}, seed + 2, 0.1), DType::Float32),
      make(pattern_host({classes, hidden}, seed + 3, 0.3), DType::Float32),
      make(pattern_host({classes}, seed + 4, 0.1), DType::Float32)};
  for (Tensor& p : params) p.set_requires_grad(true);
  kiln::optim::AdamOptions o;
  o.lr = 0.01;
  kiln::optim::Adam opt(params, o);
  const Tensor x = make(pattern_host({batch, in}, seed + 5, 1.0), DType::Float32);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch; ++i)
    labels.push_back(static_cast<int64_t>((seed + i * 3) % classes));
  const Tensor target = kiln::from_vector(labels, {batch});
  StepResult out;
  auto step = [&](int s) {
    Tensor h = kiln::relu(kiln::linear(x, params[0], params[1]));
    Tensor loss = kiln::cross_entropy(kiln::linear(h, params[2], params[3]), target);
    if (throw_at(s) == 1) throw UserFault("user fault after the forward pass");
    opt.zero_grad();
    loss.backward();
    if (throw_at(s) == 2) throw UserFault("user fault before the optimizer step");
    opt.step();
    return loss;
  };
  for (int s = 0; s < steps; ++s) {
    try {
      Tensor loss;
      if (region) {
        tr::Region r({"step"});
        loss = step(s);
      } else {
        loss = step(s);
      }
      out.losses.push_back(loss.item<double>());
    } catch (const UserFault&) {
      out.losses.push_back(-1);
    }
  }
  for (const Tensor& p : params) out.params.push_back(read(p));
  out.report = tr::explain();
  return out;
}

StepResult train(bool traced, int steps, uint64_t seed, const std::function<int(int)>& throw_at,
                 bool region = false) {
  RunModeScope scope(traced ? RunMode::Jit : RunMode::Eager);
  return train_here(steps, seed, throw_at, region);
}

void expect_same_training(const StepResult& traced, const StepResult& eager_run) {
  ASSERT_EQ(traced.losses.size(), eager_run.losses.size());
  for (size_t i = 0; i < traced.losses.size(); ++i)
    EXPECT_NEAR(traced.losses[i], eager_run.losses[i], 1e-5 * (1 + std::abs(eager_run.losses[i])))
        << "step " << i;
  for (size_t k = 0; k < traced.params.size(); ++k)
    EXPECT_TRUE(all_close(traced.params[k], eager_run.params[k], Tol{1e-5, 1e-6})) << "param " << k;
}

TEST_F(Faults, UserExceptionInTheMiddleOfATracedStep) {
  // Throws while recording (steps 1, 2), while replaying (after the forward pass with its
  // values still lazy, and after backward), twice in a row, and at the last step.
  const std::vector<std::pair<int, int>> throws_at = {{1, 1},  {2, 2},  {7, 1},  {11, 2},
                                                      {12, 2}, {13, 1}, {20, 1}, {29, 2}};
  auto where = [&](int s) {
    for (const auto& [step, kind] : throws_at)
      if (step == s) return kind;
    return 0;
  };
  for (bool region : {false, true}) {
    SCOPED_TRACE(region ? "compile()d step (a region)" : "auto-traced loop");
    const StepResult e = train(false, 30, 7, where, region);
    const StepResult t = train(true, 30, 7, where, region);
    expect_same_training(t, e);
    int64_t replays = 0;
    for (const auto& tr : t.report.traces) replays += tr.replays;
    EXPECT_GE(replays, 10) << t.report.table();
  }
  expect_runtime_works();
}

// ---------------------------------------------------------------- threads

TEST_F(Faults, ThreadsTrainingAtOnceMatchTheSameLoopsRunAlone) {
  const int threads = 3, steps = 300;
  auto none = [](int) { return 0; };
  std::vector<StepResult> alone;
  for (int t = 0; t < threads; ++t) alone.push_back(train(true, steps, 100 + t, none));
  tr::reset();  // the fixture's settings: warmup 2, JIT on
  std::vector<StepResult> together(threads);
  std::vector<std::string> errors(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        // This thread's recorder, under the settings the main thread set (shared, read only).
        tr::set_enabled(true);
        together[static_cast<size_t>(t)] =
            train_here(steps, 100 + static_cast<uint64_t>(t), none, false);
        tr::reset();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (int t = 0; t < threads; ++t) {
    SCOPED_TRACE("thread " + std::to_string(t));
    ASSERT_TRUE(errors[static_cast<size_t>(t)].empty()) << errors[static_cast<size_t>(t)];
    const StepResult& a = alone[static_cast<size_t>(t)];
    const StepResult& b = together[static_cast<size_t>(t)];
    ASSERT_EQ(a.losses.size(), b.losses.size());
    // The same kernels on the same inputs: the same bits.
    for (size_t i = 0; i < a.losses.size(); ++i)
      ASSERT_EQ(a.losses[i], b.losses[i]) << "step " << i;
    for (size_t k = 0; k < a.params.size(); ++k) EXPECT_EQ(a.params[k].v, b.params[k].v);
    // Each thread traced its own loop: its own traces, replayed.
    int64_t replays = 0;
    for (const auto& tr : b.report.traces) replays += tr.replays;
    EXPECT_GE(replays, steps - 10) << b.report.table();
    EXPECT_EQ(b.report.traces.size(), a.report.traces.size()) << b.report.table();
  }
  expect_runtime_works();
}

}  // namespace
