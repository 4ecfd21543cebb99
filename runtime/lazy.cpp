#include "runtime/lazy.h"

#include <string>

#include "runtime/error.h"

namespace kiln::lazy {
namespace {
FlushFn g_flush = nullptr;
SyncFn g_sync = nullptr;
}  // namespace

constinit thread_local bool tls_pending = false;

void set_hooks(FlushFn flush_fn, SyncFn sync_fn) {
  g_flush = flush_fn;
  g_sync = sync_fn;
}

void flush() {
  if (tls_pending && g_flush) g_flush();
}

void throw_unavailable(const char* what, const PendingValue* pending) {
  const char* why = pending ? pending->failure() : nullptr;
  throw Error(std::string(what) +
              "'s value is unavailable: the traced computation that should have produced it "
              "failed" +
              (why ? std::string(" (") + why + ")" : std::string(" earlier")));
}

bool sync(const char* what, const SourceSite& site, const TensorImpl* read) {
  if (g_sync) return g_sync(SyncKind::HostRead, what, site, read);
  flush();
  return false;
}

void sync(const char* what, const SourceSite& site, SyncKind kind) {
  if (g_sync)
    g_sync(kind, what, site, nullptr);
  else
    flush();
}

}  // namespace kiln::lazy
