#include "tracer/user_site.h"

#include <vector>

namespace kiln::tracer {
namespace {

SiteProvider g_provider;

// The open SiteScopes of this thread, innermost last, and the hash of them all.
thread_local std::vector<std::source_location> tls_scopes;
thread_local SiteId tls_scope_site = 0;

SiteId mix(SiteId h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

// "void f(int)" -> "f"; "kt::Block::forward() const" -> "kt::Block::forward".
std::string function_name(const char* signature) {
  std::string name = signature ? signature : "";
  const size_t paren = name.find('(');
  if (paren == std::string::npos) return name;
  std::string head = name.substr(0, paren);
  const size_t space = head.find_last_of(' ');
  return space == std::string::npos ? head : head.substr(space + 1);
}

std::string base_name(const std::string& file) {
  const size_t slash = file.find_last_of('/');
  return slash == std::string::npos ? file : file.substr(slash + 1);
}

}  // namespace

std::string UserSite::short_file() const { return base_name(file); }

std::string UserSite::str() const {
  if (!known()) return "<unknown>";
  std::string s = short_file() + ":" + std::to_string(line);
  if (!function.empty()) s += " (" + function + ")";
  return s;
}

std::string UserSite::str_exact() const {
  if (!known()) return "<unknown>";
  std::string s = short_file() + ":" + std::to_string(line);
  if (column > 0) s += ":" + std::to_string(column);
  if (!function.empty()) s += " (" + function + ")";
  if (!helper.empty()) s += " via " + helper;
  return s;
}

std::string UserSite::stable_key() const {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (const SiteFrame& f : key) {
    if (!s.empty()) s += ';';
    s += f.file + "|" + f.qualname + "|" + std::to_string(f.first_line) + "|+" +
         std::to_string(f.offset) + "|#";
    for (int shift = 60; shift >= 0; shift -= 4) s += hex[(f.code_hash >> shift) & 0xf];
  }
  return s;
}

void set_site_provider(SiteProvider provider) { g_provider = provider; }

SiteId current_function_site() { return g_provider.function_site ? g_provider.function_site() : 0; }

SiteId current_op_site() {
  if (g_provider.op_site) {
    const SiteId id = g_provider.op_site();
    if (id != 0) return id;
  }
  return tls_scope_site;
}

namespace {

// current_site without the provider: the SiteScopes, else the fallback.
UserSite cpp_site(const SourceSite& fallback) {
  UserSite site;
  if (!tls_scopes.empty()) {
    for (const std::source_location& loc : tls_scopes)
      site.key.push_back(SiteFrame{loc.file_name(), function_name(loc.function_name()),
                                   static_cast<int>(loc.line()), static_cast<int>(loc.column()),
                                   0});
    const std::source_location& outer = tls_scopes.front();
    site.file = outer.file_name();
    site.line = static_cast<int>(outer.line());
    site.column = static_cast<int>(outer.column());
    site.function = function_name(outer.function_name());
    if (tls_scopes.size() > 1) {
      const std::source_location& inner = tls_scopes.back();
      site.helper = base_name(inner.file_name()) + ":" + std::to_string(inner.line()) + " (" +
                    function_name(inner.function_name()) + ")";
    }
    return site;
  }
  if (fallback.file && *fallback.file) {
    site.file = fallback.file;
    site.line = fallback.line;
    site.column = fallback.column;
    site.function = function_name(fallback.function);
  }
  return site;
}

}  // namespace

UserSite current_site(const SourceSite& fallback) {
  if (g_provider.capture && g_provider.describe) {
    UserSite site;
    const SiteId id = g_provider.capture();
    if (id != 0 && g_provider.describe(id, &site)) return site;
  }
  return cpp_site(fallback);
}

CapturedSite capture_site(const SourceSite& fallback) {
  const SiteId id = g_provider.capture && g_provider.describe ? g_provider.capture() : 0;
  return CapturedSite{id, cpp_site(fallback)};
}

UserSite CapturedSite::describe() const {
  UserSite described;
  if (id != 0 && g_provider.describe && g_provider.describe(id, &described)) return described;
  return site;
}

SiteScope::SiteScope(std::source_location loc) : saved_(tls_scope_site) {
  tls_scopes.push_back(loc);
  uint64_t h =
      mix(saved_ ? saved_ : 0x5175e5c09e5ULL, reinterpret_cast<uintptr_t>(loc.file_name()));
  h = mix(h, (static_cast<uint64_t>(loc.line()) << 20) ^ loc.column());
  tls_scope_site = h ? h : 1;
}

SiteScope::~SiteScope() {
  tls_scopes.pop_back();
  tls_scope_site = saved_;
}

}  // namespace kiln::tracer
