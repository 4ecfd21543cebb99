// Sites: where in the user's program an op was called or something happened.
//
// SiteId: the exact place of one op, cheap enough to take per op. From Python it hashes
// (code object, bytecode offset f_lasti) of each kiln-package frame down to and including
// the first frame outside the package, so an op issued inside kiln's own helpers (nn
// modules, F.*, losses, optimizers) carries the user's call site plus its place inside
// the helper; `(x - mu) * (x - mu)` is two sites on one line. From C++ it hashes the open
// SiteScopes (std::source_location with its column). 0: unknown (no provider, no scope).
// Ids are valid in this process only (they hash addresses); SiteKey is the stable form.
//
// UserSite: the description of a site for reports and logs (file:line (function), with
// the column where two sites share a line, the helper it went through) and its stable
// key (file, qualified name, first line, offset, hash of the bytecode per frame).
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "runtime/lazy.h"

namespace kiln::tracer {

using SiteId = uint64_t;

// One frame of a site's stable key.
struct SiteFrame {
  std::string file;        // kiln's own files relative to the package ("kiln/nn/functional.py")
  std::string qualname;    // "GPT.forward"
  int first_line = 0;      // of the function
  int offset = 0;          // bytecode offset (Python) or column (C++)
  uint64_t code_hash = 0;  // FNV-1a of the bytecode (0 in C++)
  bool operator==(const SiteFrame& o) const = default;
};

struct UserSite {
  std::string file;
  int line = 0;
  int column = 0;  // 0: unknown
  std::string function;
  std::string helper;          // the kiln helper the op went through: "functional.py:293 (f)"
  std::vector<SiteFrame> key;  // the user's frame first, then the helpers' (inner last)

  bool known() const { return !file.empty(); }
  std::string str() const;         // "train.py:42 (step)"; "<unknown>" when not known
  std::string str_exact() const;   // "train.py:42:17 (step) via functional.py:293 (f)"
  std::string short_file() const;  // the file's base name
  std::string stable_key() const;  // "train.py|step|40|+34|#9f2c...;kiln/nn/functional.py|..."
  bool operator==(const UserSite& o) const {
    return line == o.line && column == o.column && file == o.file && function == o.function &&
           helper == o.helper;
  }
};

// What the bindings install. op_site is called per op (it must be cheap). capture
// returns the same id and keeps what describe needs, so that describe can give the
// site's words after its frames are gone (first time per site: then remembered). All
// answer 0/false when they do not know.
struct SiteProvider {
  SiteId (*op_site)() = nullptr;
  // The site without the user frame's caller: the place in the user's function whoever
  // called it (a training step called from a warmup loop and from the timed loop).
  SiteId (*function_site)() = nullptr;
  SiteId (*capture)() = nullptr;
  bool (*describe)(SiteId id, UserSite* site) = nullptr;
};
void set_site_provider(SiteProvider provider);

// The exact site of the op being dispatched now (0: unknown).
SiteId current_op_site();
// Its place in the user's function, the caller left out (0: unknown; see SiteProvider).
SiteId current_function_site();

// The user's location: the provider's answer (Python), else the innermost SiteScope,
// else the C++ fallback.
UserSite current_site(const SourceSite& fallback = {});

// A site taken now and described only if a report needs it (a region's entry, in case
// its trace aborts): with a provider, just its id (cheap); else described at once.
struct CapturedSite {
  SiteId id = 0;
  UserSite site;
  UserSite describe() const;
};
CapturedSite capture_site(const SourceSite& fallback = {});

// C++: marks the ops issued in its lifetime with its place (file, line, column,
// function); nested scopes combine, like a helper's frames under the user's. Without a
// scope, C++ ops have no site and loop heads are found by wiring alone.
class SiteScope {
 public:
  explicit SiteScope(std::source_location loc = std::source_location::current());
  ~SiteScope();
  SiteScope(const SiteScope&) = delete;
  SiteScope& operator=(const SiteScope&) = delete;

 private:
  SiteId saved_;
};

}  // namespace kiln::tracer
