#include "tracer/user_site.h"

namespace kiln::tracer {
namespace {
SiteProvider g_provider = nullptr;
}  // namespace

std::string UserSite::short_file() const {
  const size_t slash = file.find_last_of('/');
  return slash == std::string::npos ? file : file.substr(slash + 1);
}

std::string UserSite::str() const {
  if (!known()) return "<unknown>";
  std::string s = short_file() + ":" + std::to_string(line);
  if (!function.empty()) s += " (" + function + ")";
  return s;
}

void set_site_provider(SiteProvider provider) { g_provider = provider; }

UserSite current_site(const SourceSite& fallback) {
  UserSite site;
  if (g_provider && g_provider(&site)) return site;
  if (fallback.file && *fallback.file) {
    site.file = fallback.file;
    site.line = fallback.line;
    site.function = fallback.function ? fallback.function : "";
    // Trim C++ signatures to the function's name: "void f(int)" -> "f".
    const size_t paren = site.function.find('(');
    if (paren != std::string::npos) {
      std::string head = site.function.substr(0, paren);
      const size_t space = head.find_last_of(' ');
      site.function = space == std::string::npos ? head : head.substr(space + 1);
    }
  }
  return site;
}

}  // namespace kiln::tracer
