// UserSite: where in the user's program something happened (file:line and function),
// for graph-break reports and logs. C++ sites come from std::source_location; Python
// installs a provider that walks the interpreter's frames to the first user frame.
#pragma once

#include <string>

#include "runtime/lazy.h"

namespace kiln::tracer {

struct UserSite {
  std::string file;
  int line = 0;
  std::string function;

  bool known() const { return !file.empty(); }
  std::string str() const;         // "train.py:42 (step)"; "<unknown>" when not known
  std::string short_file() const;  // the file's base name
  bool operator==(const UserSite& o) const {
    return line == o.line && file == o.file && function == o.function;
  }
};

// Returns true and fills *site when it knows the user's current location.
using SiteProvider = bool (*)(UserSite* site);
void set_site_provider(SiteProvider provider);

// The user's location: the provider's answer (Python), else the C++ fallback.
UserSite current_site(const SourceSite& fallback = {});

}  // namespace kiln::tracer
