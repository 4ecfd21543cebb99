// CUDA Graph recording, patching and replay for one compiled trace (see cuda_graph_plan.h).
#include "jit/cuda/cuda_graph_plan.h"

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/cuda_context.h"

namespace kiln::jit::cuda_backend {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("[cuda graph] ") + what + ": " + cudaGetErrorName(e) +
                             " (" + cudaGetErrorString(e) + ")");
  }
}

}  // namespace

struct CudaGraphPlan::Impl {
  struct Node {
    cudaGraphNode_t node = nullptr;
    void* fn = nullptr;  // kernel nodes
    unsigned grid = 0, block = 0, block_y = 1;
    std::vector<int64_t> args;
    void* dst = nullptr;  // copy nodes
    const void* src = nullptr;
    size_t bytes = 0;
  };
  enum class Mode { Direct, Recording, Patching } mode = Mode::Direct;
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;  // kept: the node handles below belong to it
  cudaGraphExec_t exec = nullptr;
  std::vector<Node> nodes;  // by id
  std::shared_ptr<cuda_context::CapturePool> pool;

  Node& at(int id) {
    if (static_cast<size_t>(id) >= nodes.size()) nodes.resize(static_cast<size_t>(id) + 1);
    return nodes[static_cast<size_t>(id)];
  }
  cudaGraphNode_t last_captured() {
    cudaStreamCaptureStatus status;
    const cudaGraphNode_t* deps = nullptr;
    size_t n = 0;
    check(cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &n),
          "cudaStreamGetCaptureInfo");
    if (status != cudaStreamCaptureStatusActive || n == 0)
      throw std::runtime_error("[cuda graph] the capture was invalidated");
    return deps[n - 1];
  }
  void release_graph() {
    if (exec) {
      cudaStreamSynchronize(stream);  // a launch of it may still run
      cudaGraphExecDestroy(exec);
      exec = nullptr;
    }
    if (graph) cudaGraphDestroy(graph);
    graph = nullptr;
  }
};

CudaGraphPlan::CudaGraphPlan(int device) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->stream = static_cast<cudaStream_t>(cuda_context::stream(device));
}

CudaGraphPlan::~CudaGraphPlan() {
  impl_->release_graph();
  cudaGetLastError();
}

bool CudaGraphPlan::recorded() const { return impl_->exec != nullptr; }

void CudaGraphPlan::kernel(int id, void* fn, unsigned grid, unsigned block, unsigned block_y,
                           const std::vector<int64_t>& args) {
  Impl& m = *impl_;
  void* params[1] = {const_cast<int64_t*>(args.data())};
  if (m.mode == Impl::Mode::Patching) {
    Impl::Node& n = m.at(id);
    if (n.args == args && n.grid == grid && n.block == block && n.block_y == block_y) return;
    if (!n.node || !n.fn)
      throw std::logic_error("[cuda graph] kernel node " + std::to_string(id) +
                             " is not in the recorded graph (kiln bug: it should re-record)");
    cudaKernelNodeParams p{};
    p.func = fn;
    p.gridDim = dim3(grid);
    p.blockDim = dim3(block, block_y);
    p.kernelParams = params;
    check(cudaGraphExecKernelNodeSetParams(m.exec, n.node, &p), "kernel node update");
    n.args = args;
    n.grid = grid;
    n.block = block;
    n.block_y = block_y;
    ++stats_.kernel_updates;
    return;
  }
  check(cudaLaunchKernel(fn, dim3(grid), dim3(block, block_y), params, 0, m.stream),
        "cudaLaunchKernel");
  if (m.mode == Impl::Mode::Recording) {
    Impl::Node& n = m.at(id);
    n = Impl::Node{m.last_captured(), fn, grid, block, block_y, args, nullptr, nullptr, 0};
  }
}

void CudaGraphPlan::copy(int id, void* dst, const void* src, size_t bytes) {
  Impl& m = *impl_;
  if (m.mode == Impl::Mode::Patching) {
    Impl::Node& n = m.at(id);
    if (n.dst == dst && n.src == src && n.bytes == bytes) return;
    if (!n.node || n.fn)
      throw std::logic_error("[cuda graph] copy node " + std::to_string(id) +
                             " is not in the recorded graph (kiln bug: it should re-record)");
    check(cudaGraphExecMemcpyNodeSetParams1D(m.exec, n.node, dst, src, bytes,
                                             cudaMemcpyDeviceToDevice),
          "memcpy node update");
    n.dst = dst;
    n.src = src;
    n.bytes = bytes;
    ++stats_.copy_updates;
    return;
  }
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, m.stream), "cudaMemcpyAsync");
  if (m.mode == Impl::Mode::Recording) {
    Impl::Node& n = m.at(id);
    n = Impl::Node{m.last_captured(), nullptr, 0, 0, 1, {}, dst, src, bytes};
  }
}

namespace {

// The capture pool the graphs of this thread share on `device`: they run one at a time on
// the device's stream, so what one graph's temporaries used is free for the next graph's,
// and a step's graphs (segments, variants) keep the most temporaries one of them has alive
// at once, not their sum. It lives while a graph recorded in it does.
std::shared_ptr<cuda_context::CapturePool> shared_capture_pool(int device) {
  thread_local std::map<int, std::weak_ptr<cuda_context::CapturePool>> pools;
  std::shared_ptr<cuda_context::CapturePool> pool = pools[device].lock();
  if (!pool) {
    pool = std::make_shared<cuda_context::CapturePool>(device);
    pools[device] = pool;
  }
  return pool;
}

}  // namespace

bool CudaGraphPlan::record_and_launch(const std::function<void()>& launch_all, std::string* why) {
  Impl& m = *impl_;
  std::shared_ptr<cuda_context::CapturePool> pool = shared_capture_pool(m.device);
  cudaError_t e = cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *why = std::string("cudaStreamBeginCapture: ") + cudaGetErrorName(e);
    return false;
  }
  const bool again = m.exec != nullptr;
  std::vector<Impl::Node> previous = m.nodes;
  m.nodes.clear();  // a node of the old graph left out of this one must not be patched
  m.mode = Impl::Mode::Recording;
  pool->open();
  std::string failure;
  try {
    launch_all();
  } catch (const std::exception& ex) {
    failure = ex.what();
  }
  pool->close();
  m.mode = Impl::Mode::Direct;
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(m.stream, &graph);
  if (failure.empty() && e != cudaSuccess)
    failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorName(e);
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorName(e);
  }
  if (!failure.empty()) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    m.nodes = std::move(previous);
    *why = failure;
    return false;
  }
  m.release_graph();
  m.graph = graph;
  m.exec = exec;
  m.pool = std::move(pool);
  ++(again ? stats_.recaptures : stats_.captures);
  launch();
  return true;
}

void CudaGraphPlan::begin_patch() { impl_->mode = Impl::Mode::Patching; }

void CudaGraphPlan::launch() {
  Impl& m = *impl_;
  m.mode = Impl::Mode::Direct;
  check(cudaGraphLaunch(m.exec, m.stream), "cudaGraphLaunch");
  ++stats_.launches;
}

}  // namespace kiln::jit::cuda_backend
