#include "jit/kernel_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "jit/kernel_ir.h"

namespace kiln::jit {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'K', 'C', '1', '\n'};

// Whether a path is owned by us and not writable by group or others.
bool trusted(const struct stat& st) {
  return st.st_uid == geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

bool make_private_dirs(const std::string& path, std::string* why) {
  std::string partial;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') partial = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    partial += part;
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      *why = "cannot create " + partial + ": " + std::strerror(errno);
      return false;
    }
    partial += "/";
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *why = path + " is not a directory";
    return false;
  }
  if (!trusted(st)) {
    *why = path + " is owned by another user or writable by group/others; not trusted";
    return false;
  }
  return true;
}

void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
uint64_t get_u64(const std::string& s, size_t at) {
  uint64_t v;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}

}  // namespace

std::string KernelCache::default_root() {
  if (const char* d = std::getenv("KILN_CACHE_DIR")) {
    const std::string v = d;
    if (v == "off" || v == "0" || v.empty()) return "";
    return v;
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kiln";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/kiln";
  return "";
}

KernelCache::KernelCache(const std::string& kind) {
  const std::string root = default_root();
  if (root.empty()) {
    disabled_reason_ = "disk cache off (KILN_CACHE_DIR=off or no home directory)";
    return;
  }
  std::string why;
  if (!make_private_dirs(root, &why) || !make_private_dirs(root + "/" + kind, &why)) {
    disabled_reason_ = "disk cache off: " + why;
    return;
  }
  dir_ = root + "/" + kind;
}

std::string KernelCache::path_for(const std::string& key) const {
  return dir_ + "/" + key + ".bin";
}

std::optional<std::string> KernelCache::load(const std::string& key, std::string* why) {
  auto refuse = [&](const char* reason) -> std::optional<std::string> {
    ++stats_.rejected;
    if (why) *why = reason;
    return std::nullopt;
  };
  if (!enabled()) return std::nullopt;
  const std::string path = path_for(key);
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    ++stats_.misses;
    return std::nullopt;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !trusted(st)) {
    close(fd);
    return refuse("not a regular file owned by this user and private to it; not trusted");
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t r = read(fd, data.data() + got, data.size() - got);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  close(fd);
  // magic | key length | key | payload length | checksum | payload
  const size_t head = sizeof(kMagic) + 8;
  if (got != data.size() || data.size() < head || std::memcmp(data.data(), kMagic, 8) != 0)
    return refuse("not a kiln cache file (bad header)");
  const uint64_t klen = get_u64(data, 8);
  if (klen != key.size() || data.size() < head + klen + 16 || data.compare(head, klen, key) != 0)
    return refuse("its header names another key (renamed or copied)");
  const uint64_t plen = get_u64(data, head + klen);
  const uint64_t sum = get_u64(data, head + klen + 8);
  const size_t start = head + klen + 16;
  if (data.size() - start != plen) return refuse("truncated (payload length)");
  std::string payload = data.substr(start);
  if (fnv1a(payload, fnv1a(key)) != sum) return refuse("checksum mismatch (corrupt or tampered)");
  ++stats_.hits;
  return payload;
}

void KernelCache::store(const std::string& key, const std::string& payload) {
  if (!enabled()) return;
  std::string data(kMagic, sizeof(kMagic));
  put_u64(data, key.size());
  data += key;
  put_u64(data, payload.size());
  put_u64(data, fnv1a(payload, fnv1a(key)));
  data += payload;
  static thread_local std::mt19937_64 rng(std::random_device{}());
  const std::string tmp = dir_ + "/." + key + "." + std::to_string(rng()) + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    ++stats_.write_failures;
    return;
  }
  size_t put = 0;
  bool ok = true;
  while (put < data.size()) {
    const ssize_t w = write(fd, data.data() + put, data.size() - put);
    if (w <= 0) {
      ok = false;
      break;
    }
    put += static_cast<size_t>(w);
  }
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path_for(key).c_str()) != 0) {
    unlink(tmp.c_str());
    ++stats_.write_failures;
    return;
  }
  ++stats_.writes;
}

}  // namespace kiln::jit
