// Tracer settings, read once from the environment at first use and changeable through
// the API afterwards:
//   KILN_TRACE=0            no automatic tracing (explicit regions and compile() still trace)
//   KILN_WARMUP=N           times a trace must be seen before it compiles (default 2)
//   KILN_RECOMPILE_LIMIT=N  recompiles per trace before it stays eager (default 8)
//   KILN_MAX_TRACE=N        longest trace in ops (default 8192: a training step of the
//                           word-language-model LSTM, 2 layers x 35 steps forward and
//                           backward, is 5,473 ops; it compiles in 0.2 s on the CPU)
//   KILN_MAX_TRACES=N       compiled traces kept per thread, least recently used dropped
//                           beyond it (default 512)
//   KILN_TRACE_CACHE_OPS=N  recorded ops (trie nodes, compiled or not) kept per thread,
//                           least recently used traces dropped beyond it (default 65536)
//   KILN_JIT=0              compiled traces run through the interpreter (no fused kernels)
//   KILN_COMPILE_SYNC=1     a hot trace compiles on the thread that ran it, stalling that
//                           iteration (default: on the background compile thread while the
//                           loop runs eagerly; tracer/background_compile.h)
//   KILN_JIT_DISABLE=a,b    JIT passes switched off for bisecting: cse, dce, fuse,
//                           attention, epilogue, simplify; `store` cannot be (checked by
//                           jit/pipeline.h when a trace compiles)
//   KILN_JIT_CPU_ATTENTION=1  the `attention` pass (jit/attention_rewrite.h) runs on CPU
//                           traces too (default: CUDA only; the CPU's fused forward is not
//                           faster than the composite there)
//   KILN_VERIFY=1           run each replay eagerly too and raise on a mismatch
//   KILN_SPEED_CHECK=1      CPU traces are measured against eager (speed_check.h): one
//                           that replays slower than eager stays eager. Off by default:
//                           its trial runs half of 16 replays eagerly, which cost a
//                           layernorm 4096x1024 loop 9x (bench A/B of 2026-11-25)
//   KILN_WARM_START=0       compiled CPU traces are neither saved to nor loaded from
//                           KILN_CACHE_DIR (tracer/warm_start.h; default: on)
//   KILN_LOGS=a,b,...       graph_breaks, recompiles, guards, trace, perf, walks (or all)
//   KILN_LOGFILE=path       where log lines go (default stderr)
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kiln::tracer {

enum LogCategory : unsigned {
  kLogGraphBreaks = 1u << 0,
  kLogRecompiles = 1u << 1,
  kLogGuards = 1u << 2,
  kLogTrace = 1u << 3,
  kLogPerf = 1u << 4,
  kLogWalks = 1u << 5,  // every walk's end: how, where it began, its length
};

struct TracerConfig {
  bool auto_trace = true;
  int warmup = 2;
  int recompile_limit = 8;
  int max_trace_length = 8192;
  int max_traces = 512;             // compiled traces kept per thread (LRU)
  int64_t trace_cache_ops = 65536;  // recorded ops kept per thread (LRU)
  bool verify = false;
  bool jit = true;
  bool background_compile = true;        // KILN_COMPILE_SYNC=1 turns it off
  bool speed_check = false;              // tracer/speed_check.h (KILN_SPEED_CHECK=1)
  bool warm_start = true;                // tracer/warm_start.h (KILN_WARM_START=0: off)
  bool symbolic_shapes = true;           // tracer/symbolic_shapes.h (KILN_SYMBOLIC_SHAPES=0: off)
  std::vector<std::string> jit_disable;  // pass names, KILN_JIT_DISABLE's comma list
  bool cpu_attention = false;            // KILN_JIT_CPU_ATTENTION=1
  unsigned log_mask = 0;
  std::FILE* log_file = stderr;
};

TracerConfig& config();
// Parses "graph_breaks,recompiles" into a mask; unknown names throw ValueError.
unsigned parse_log_categories(const std::string& spec);

// Writes "[kiln] <line>" if the category is enabled.
void log_line(LogCategory category, const std::string& line);
inline bool logging(LogCategory category) { return (config().log_mask & category) != 0; }

}  // namespace kiln::tracer
