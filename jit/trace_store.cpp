// The warm-start trace store (tracer/persist.h's TraceStore) on disk: one file per
// compiled trace under the kernel cache's root, subdirectory "traces", in the kernel
// cache's file format (jit/kernel_cache.h: header with the full key, payload length and
// checksum; a private directory; a file owned by someone else, writable by others,
// truncated, renamed or corrupt is refused; written to a temporary file renamed into
// place, so two processes writing at once leave one whole file). Names:
//
//   <site hash>-<anchor key hash>-<program hash>.bin
//
// An anchor's files are handed out newest first. The directory is listed once, at the first
// question (has_site), and what this process saves is added to that list. A refused file is logged
// once with its reason; the trace then records and compiles as in a cold process, and its recompile
// overwrites the file.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <unordered_set>

#include "jit/kernel_cache.h"
#include "tracer/config.h"
#include "tracer/persist.h"

namespace kiln::jit {
namespace {

std::string hex16(uint64_t v) {
  static const char* hex = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = hex[v & 0xf];
  return s;
}

class DiskTraceStore final : public tracer::TraceStore {
 public:
  bool empty() override {  // asked per recorded op: no lock once listed
    if (!listed_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(mutex_);
      list_once();
    }
    return !any_.load(std::memory_order_acquire);
  }

  bool has_site(uint64_t site_hash) override {
    std::lock_guard<std::mutex> lock(mutex_);
    list_once();
    return sites_.count(hex16(site_hash)) != 0;
  }

  std::vector<std::string> load(uint64_t site_hash, const std::string& anchor_key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    list_once();
    std::vector<std::string> payloads;
    if (!cache_ || !cache_->enabled()) return payloads;
    const std::string prefix = hex16(site_hash) + "-" + hex16(tracer::text_hash(anchor_key)) + "-";
    std::vector<std::pair<int64_t, std::string>> newest_first;  // (-mtime, key)
    for (auto it = keys_.lower_bound(prefix); it != keys_.end() && it->starts_with(prefix); ++it) {
      struct stat st;
      const int64_t mtime = stat(cache_->path_for(*it).c_str(), &st) == 0 ? st.st_mtim.tv_sec : 0;
      newest_first.emplace_back(-mtime, *it);
    }
    std::sort(newest_first.begin(), newest_first.end());
    for (const auto& [_, key] : newest_first) {
      std::string why;
      std::optional<std::string> payload = cache_->load(key, &why);
      if (payload) {
        payloads.push_back(std::move(*payload));
      } else if (!why.empty() && refused_.insert(key).second) {
        std::fprintf(tracer::config().log_file,
                     "[kiln] warm start: refused %s: %s; the trace records and compiles "
                     "again\n",
                     cache_->path_for(key).c_str(), why.c_str());
      }
    }
    return payloads;
  }

  void save(uint64_t site_hash, const std::string& anchor_key, uint64_t program_hash,
            const std::string& payload) override {
    std::lock_guard<std::mutex> lock(mutex_);
    list_once();
    if (!cache_ || !cache_->enabled()) return;
    const std::string key =
        hex16(site_hash) + "-" + hex16(tracer::text_hash(anchor_key)) + "-" + hex16(program_hash);
    cache_->store(key, payload);
    keys_.insert(key);
    sites_.insert(hex16(site_hash));
    any_.store(true, std::memory_order_release);
  }

  std::string describe() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!cache_) return "not opened yet";
    return cache_->enabled() ? cache_->dir() : cache_->disabled_reason();
  }

 private:
  void list_once() {
    if (cache_) return;
    cache_ = std::make_unique<KernelCache>("traces");
    list_dir();
    any_.store(!keys_.empty(), std::memory_order_release);
    listed_.store(true, std::memory_order_release);
  }

  void list_dir() {
    if (!cache_->enabled()) return;
    DIR* dir = opendir(cache_->dir().c_str());
    if (!dir) return;
    while (const dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      // 16 hex - 16 hex - 16 hex .bin (temporary files start with '.')
      if (name.size() != 16 * 3 + 2 + 4 || !name.ends_with(".bin") || name[16] != '-' ||
          name[33] != '-')
        continue;
      keys_.insert(name.substr(0, name.size() - 4));
      sites_.insert(name.substr(0, 16));
    }
    closedir(dir);
  }

  mutable std::mutex mutex_;
  std::unique_ptr<KernelCache> cache_;
  std::set<std::string> keys_;               // sorted: an anchor's files are a range
  std::unordered_set<std::string> sites_;    // site hashes with a stored trace
  std::unordered_set<std::string> refused_;  // logged once each
  std::atomic<bool> listed_{false}, any_{false};
};

struct Registration {
  Registration() {
    static DiskTraceStore store;
    tracer::set_trace_store(&store);
  }
} registration;

}  // namespace
}  // namespace kiln::jit
