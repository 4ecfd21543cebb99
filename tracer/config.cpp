#include "tracer/config.h"

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "runtime/error.h"

namespace kiln::tracer {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n >= 0) ? static_cast<int>(n) : fallback;
}

std::vector<std::string> split_list(const std::string& spec) {
  std::vector<std::string> items;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t first = item.find_first_not_of(" \t");
    if (first != std::string::npos)
      items.push_back(item.substr(first, item.find_last_not_of(" \t") - first + 1));
  }
  return items;
}

TracerConfig load() {
  TracerConfig c;
  const char* trace = std::getenv("KILN_TRACE");
  c.auto_trace = !(trace && std::string(trace) == "0");
  c.warmup = std::max(1, env_int("KILN_WARMUP", 2));
  c.recompile_limit = env_int("KILN_RECOMPILE_LIMIT", 8);
  c.max_trace_length = std::max(2, env_int("KILN_MAX_TRACE", 8192));
  c.max_traces = std::max(1, env_int("KILN_MAX_TRACES", 512));
  c.trace_cache_ops = std::max(64, env_int("KILN_TRACE_CACHE_OPS", 65536));
  c.verify = env_int("KILN_VERIFY", 0) != 0;
  c.jit = env_int("KILN_JIT", 1) != 0;
  c.background_compile = env_int("KILN_COMPILE_SYNC", 0) == 0;
  c.speed_check = env_int("KILN_SPEED_CHECK", 0) != 0;
  c.warm_start = env_int("KILN_WARM_START", 1) != 0;
  // On by default; KILN_SYMBOLIC_SHAPES=0 makes every size its own variant.
  c.symbolic_shapes = env_int("KILN_SYMBOLIC_SHAPES", 1) != 0;
  c.cpu_attention = env_int("KILN_JIT_CPU_ATTENTION", 0) != 0;
  if (const char* passes = std::getenv("KILN_JIT_DISABLE")) c.jit_disable = split_list(passes);
  if (const char* logs = std::getenv("KILN_LOGS")) {
    try {
      c.log_mask = parse_log_categories(logs);
    } catch (const Error& e) {
      std::fprintf(stderr, "[kiln] ignoring KILN_LOGS: %s\n", e.what());
    }
  }
  if (const char* file = std::getenv("KILN_LOGFILE")) {
    if (std::FILE* f = std::fopen(file, "a")) c.log_file = f;
  }
  return c;
}

}  // namespace

TracerConfig& config() {
  static TracerConfig c = load();
  return c;
}

unsigned parse_log_categories(const std::string& spec) {
  unsigned mask = 0;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if (item == "graph_breaks")
      mask |= kLogGraphBreaks;
    else if (item == "recompiles")
      mask |= kLogRecompiles;
    else if (item == "guards")
      mask |= kLogGuards;
    else if (item == "trace")
      mask |= kLogTrace;
    else if (item == "perf")
      mask |= kLogPerf;
    else if (item == "walks")
      mask |= kLogWalks;
    else if (item == "all")
      mask |= ~0u;
    else
      throw ValueError("[KILN_LOGS] unknown log category '" + item +
                       "' (expected graph_breaks, recompiles, guards, trace, perf, walks or all)");
  }
  return mask;
}

void log_line(LogCategory category, const std::string& line) {
  if (!logging(category)) return;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(config().log_file, "[kiln] %s\n", line.c_str());
  std::fflush(config().log_file);
}

}  // namespace kiln::tracer
