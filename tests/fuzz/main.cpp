// kiln_fuzz: the differential fuzzer's command line (see tests/fuzz/README.md).
//
//   kiln_fuzz [--seed S] [--programs N | --seconds S] [--device cpu|cuda]
//             [--save-dir DIR] [--no-shrink] [--max-steps N] [--verbose]
//   kiln_fuzz --program-seed X [--device cpu|cuda]     one generated program, printed
//   kiln_fuzz --replay FILE                            a saved case
//
// Exit status: 0 when every program agreed in every leg, 1 on a mismatch, 2 on bad usage.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "differential.h"
#include "fuzz_case.h"
#include "generator.h"
#include "listing.h"
#include "program_text.h"
#include "shrink.h"

namespace {

using namespace kfuzz;

struct Options {
  uint64_t seed = 0;
  bool seed_given = false;
  int programs = -1;
  double seconds = -1;
  std::string device = "cpu";
  std::string save_dir = KILN_FUZZ_CASES_DIR;
  bool shrink = true;
  int max_steps = 24;
  bool verbose = false;
  bool single = false;
  uint64_t program_seed = 0;
  std::string replay;
};

// What a crash handler prints: the reproducer of the program that was running.
char g_crash_line[256] = "[kiln_fuzz] crashed before the first program\n";

void on_crash(int sig) {
  const ssize_t n = ::write(STDERR_FILENO, g_crash_line, std::strlen(g_crash_line));
  (void)n;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

uint64_t program_seed_of(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) >> 1;  // fits an int64 (the text format reads it back)
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--seed") {
      o->seed = std::stoull(next());
      o->seed_given = true;
    } else if (a == "--programs") {
      o->programs = std::stoi(next());
    } else if (a == "--seconds") {
      o->seconds = std::stod(next());
    } else if (a == "--device") {
      o->device = next();
      if (o->device != "cpu" && o->device != "cuda")
        throw std::invalid_argument("--device cpu|cuda");
    } else if (a == "--save-dir") {
      o->save_dir = next();
    } else if (a == "--no-shrink") {
      o->shrink = false;
    } else if (a == "--max-steps") {
      o->max_steps = std::stoi(next());
    } else if (a == "--verbose") {
      o->verbose = true;
    } else if (a == "--program-seed") {
      o->single = true;
      o->program_seed = std::stoull(next());
    } else if (a == "--replay") {
      o->replay = next();
    } else {
      throw std::invalid_argument("unknown argument " + a);
    }
  }
  return true;
}

// Runs one program; on a mismatch shrinks it, prints the reproducer and the listing,
// and saves the case. Returns true when the program agreed everywhere.
bool check(const Program& p, const std::vector<Leg>& legs, const Options& o) {
  if (o.verbose) std::cout << cpp_listing(p) << std::flush;
  const std::optional<Mismatch> m = find_mismatch(p, legs);
  if (!m) return true;
  const std::string repro = reproducer(p.seed, o.device);
  std::cout << "[kiln_fuzz] MISMATCH in program seed " << p.seed << ": " << m->leg << "\n  "
            << m->detail << "\n  reproduce: " << repro << "\n";
  Program small = p;
  if (o.shrink) {
    const bool error_kind = m->detail.find("no error") != std::string::npos ||
                            m->detail.find("Error") != std::string::npos;
    auto still_fails = [&](const Program& c) {
      const std::optional<Mismatch> again = find_mismatch(c, legs);
      if (!again || again->leg != m->leg) return false;
      const bool kind = again->detail.find("no error") != std::string::npos ||
                        again->detail.find("Error") != std::string::npos;
      return kind == error_kind;
    };
    ShrinkStats stats;
    small = shrink(p, still_fails, {}, &stats);
    std::cout << "[kiln_fuzz] shrunk from " << p.steps.size() << " to " << small.steps.size()
              << " steps (" << stats.candidates << " candidates, " << stats.accepted << " kept)\n";
  }
  const Mismatch shown = find_mismatch(small, legs).value_or(*m);
  std::cout << "  " << shown.detail << "\n" << cpp_listing(small);
  const std::string path = save_case(o.save_dir, small, case_file_text(small, shown, repro));
  std::cout << "[kiln_fuzz] saved "
            << (path.empty() ? "nothing (cannot write " + o.save_dir + ")" : path) << "\n"
            << std::flush;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    parse(argc, argv, &o);
  } catch (const std::exception& e) {
    std::cerr << "kiln_fuzz: " << e.what() << "\n";
    return 2;
  }
  // A private kernel cache per run: nothing from earlier runs, nothing left in ~/.cache.
  char cache_dir[] = "/tmp/kiln-fuzz-cache-XXXXXX";
  if (!std::getenv("KILN_CACHE_DIR") && ::mkdtemp(cache_dir))
    ::setenv("KILN_CACHE_DIR", cache_dir, 1);
  for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) std::signal(sig, on_crash);

  const bool have_gpu = kt::have_gpu();
  const bool with_cuda = o.device == "cuda" && have_gpu;
  if (o.device == "cuda" && !have_gpu) {
    std::cout << "[kiln_fuzz] no CUDA GPU: the CUDA legs are skipped, the CPU legs run\n";
    o.device = "cpu";
  }
  const std::vector<Leg> legs = legs_for(with_cuda);
  GenerateOptions gen;
  gen.device = o.device;
  gen.max_steps = std::max(o.max_steps, gen.min_steps);

  if (!o.replay.empty()) {
    const Program p = from_text(read_file(o.replay));
    const std::optional<Mismatch> m = find_mismatch(p, legs);
    std::cout << cpp_listing(p) << "[kiln_fuzz] " << o.replay << ": "
              << (m ? m->leg + " disagrees: " + m->detail : "all legs agree") << "\n";
    return m ? 1 : 0;
  }
  if (o.single) {
    o.verbose = true;
    std::snprintf(g_crash_line, sizeof g_crash_line, "[kiln_fuzz] crashed in %s\n",
                  reproducer(o.program_seed, o.device).c_str());
    const bool ok = check(generate(o.program_seed, gen), legs, o);
    std::cout << "[kiln_fuzz] program seed " << o.program_seed << ": "
              << (ok ? "all legs agree" : "MISMATCH") << "\n";
    return ok ? 0 : 1;
  }
  if (!o.seed_given)
    o.seed = std::chrono::steady_clock::now().time_since_epoch().count() & 0xffffffff;
  if (o.programs < 0 && o.seconds < 0) o.programs = 100;
  std::cout << "[kiln_fuzz] seed " << o.seed << ", legs:";
  for (const Leg& l : legs) std::cout << " " << l.name;
  std::cout << (o.seconds >= 0 ? ", " + std::to_string(o.seconds) + " s" : "")
            << (o.programs >= 0 ? ", " + std::to_string(o.programs) + " programs" : "") << "\n"
            << std::flush;

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  int run = 0, mismatches = 0;
  size_t steps = 0;
  std::vector<int> op_uses(kiln::kNumOps, 0);
  for (uint64_t i = 0;; ++i) {
    if (o.programs >= 0 && run >= o.programs) break;
    if (o.seconds >= 0 && elapsed() >= o.seconds) break;
    const uint64_t ps = program_seed_of(o.seed, i);
    std::snprintf(g_crash_line, sizeof g_crash_line, "[kiln_fuzz] crashed in program %llu: %s\n",
                  static_cast<unsigned long long>(i), reproducer(ps, o.device).c_str());
    const Program p = generate(ps, gen);
    steps += p.steps.size();
    for (const Step& s : p.steps) ++op_uses[static_cast<size_t>(s.op)];
    if (!check(p, legs, o)) ++mismatches;
    ++run;
    if (run % 50 == 0)
      std::cout << "[kiln_fuzz] " << run << " programs, " << mismatches << " mismatches, "
                << static_cast<int>(elapsed()) << " s\n"
                << std::flush;
  }
  int covered = 0;
  for (int n : op_uses) covered += n > 0;
  std::cout << "[kiln_fuzz] done: " << run << " programs (" << steps << " steps, " << covered
            << " of " << kiln::kNumOps << " registry ops), " << mismatches << " mismatches, "
            << static_cast<int>(elapsed()) << " s, seed " << o.seed << "\n";
  return mismatches == 0 ? 0 : 1;
}
