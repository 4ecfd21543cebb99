// Profile -> Chrome trace event JSON ({"traceEvents": [...]}, "X" complete events),
// which Perfetto and chrome://tracing open. Tracks:
//   pid 1 "kiln host", tid 1 "CPU ops": every host span, nested (the ops a replay or a
//     side exit runs lie inside its span; a graph break's span covers the boundary work)
//   pid 1, tid 2 "replays": the replay, compile, graph-break and materialize spans alone
//     (no ops, no fused kernels)
//   pid 2 "kiln GPU", tid 100+N "GPU cuda:N": GPU spans from CUDA events
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "tracer/profiler.h"
#include "tracer/report.h"

namespace kiln::profiler {
namespace {

using tracer::json_escape;

std::string us(int64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  return buf;
}

std::string args_of(const Event& e) {
  std::ostringstream a;
  a << "{\"device\": \"" << json_escape(e.device) << "\"";
  if (e.kind == Kind::Replay || e.kind == Kind::Compile) {
    a << ", \"trace\": " << e.trace_id << ", \"backend\": \"" << json_escape(e.backend)
      << "\", \"kernels\": " << e.kernels << ", \"ops\": " << e.ops;
  }
  if (e.kind == Kind::GraphBreak) {
    a << ", \"reason\": \"" << json_escape(e.reason) << "\", \"file\": \"" << json_escape(e.file)
      << "\", \"line\": " << e.line << ", \"function\": \"" << json_escape(e.function)
      << "\", \"eager_ops\": " << e.ops << ", \"eager_ms\": " << e.eager_ns / 1e6;
  }
  a << "}";
  return a.str();
}

void complete(std::ostringstream& os, bool& first, const Event& e, int64_t start, int64_t end,
              int pid, int tid) {
  os << (first ? "\n  " : ",\n  ") << "{\"name\": \"" << json_escape(e.name) << "\", \"cat\": \""
     << kind_name(e.kind) << "\", \"ph\": \"X\", \"ts\": " << us(start)
     << ", \"dur\": " << us(std::max<int64_t>(0, end - start)) << ", \"pid\": " << pid
     << ", \"tid\": " << tid << ", \"args\": " << args_of(e) << "}";
  first = false;
}

void metadata(std::ostringstream& os, bool& first, const char* what, int pid, int tid,
              const std::string& name) {
  os << (first ? "\n  " : ",\n  ") << "{\"name\": \"" << what
     << "\", \"ph\": \"M\", \"pid\": " << pid << ", \"tid\": " << tid << ", \"args\": {\"name\": \""
     << json_escape(name) << "\"}}";
  first = false;
}

}  // namespace

std::string Profile::chrome_trace_json() const {
  const int64_t open_end = elapsed_ns();
  std::vector<size_t> order(events().size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto end_of = [&](const Event& e) { return e.end_ns < e.start_ns ? open_end : e.end_ns; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Event &x = events()[a], &y = events()[b];
    return x.start_ns < y.start_ns || (x.start_ns == y.start_ns && end_of(x) > end_of(y));
  });
  std::ostringstream os;
  bool first = true;
  os << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
  metadata(os, first, "process_name", 1, 0, "kiln host");
  metadata(os, first, "thread_name", 1, 1, "CPU ops");
  metadata(os, first, "thread_name", 1, 2, "replays");
  std::vector<std::string> gpus;
  for (const Event& e : events())
    if (e.gpu_start_ns >= 0 && std::find(gpus.begin(), gpus.end(), e.device) == gpus.end())
      gpus.push_back(e.device);
  if (!gpus.empty()) metadata(os, first, "process_name", 2, 0, "kiln GPU");
  auto gpu_tid = [&](const std::string& device) {
    const size_t colon = device.find(':');
    return 100 + (colon == std::string::npos ? 0 : std::atoi(device.c_str() + colon + 1));
  };
  for (const std::string& g : gpus) metadata(os, first, "thread_name", 2, gpu_tid(g), "GPU " + g);
  for (size_t i : order) {
    const Event& e = events()[i];
    complete(os, first, e, e.start_ns, end_of(e), 1, 1);
    if (e.kind != Kind::Op && e.kind != Kind::Kernel)
      complete(os, first, e, e.start_ns, end_of(e), 1, 2);
  }
  for (size_t i : order) {
    const Event& e = events()[i];
    if (e.gpu_start_ns >= 0)
      complete(os, first, e, e.gpu_start_ns, e.gpu_end_ns, 2, gpu_tid(e.device));
  }
  os << "\n]}\n";
  return os.str();
}

void Profile::export_chrome_trace(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(f.good(), ValueError, "[export_chrome_trace] cannot write '", path, "'");
  f << chrome_trace_json();
  f.close();
  KILN_CHECK(!f.fail(), Error, "[export_chrome_trace] writing '", path, "' failed");
}

}  // namespace kiln::profiler
