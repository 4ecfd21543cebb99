// The on-disk form of a compiled trace, for warm starts (warm_start.h): what a later
// process needs to put the trace back on its anchor and compile it again from the
// kernel cache, with no recording. Serialized: the anchor's key (the first op's stable
// site key, user_site.h, and its wiring), the anchor's first op and the trace's
// TraceProgram (each TraceOp: op, attributes, input references, the guards of its new
// external inputs, scalar kinds, in-place target, output metadata; the program's external
// and scalar counts and live flags). Sites of the ops below the anchor are not stored
// (they are per-process ids; the walk fills them in as it replays). Versioned
// (kFormatVersion) and tied to this build (build_id()): a payload of another version or
// build is refused with the reason, never half read.
//
// The files themselves (checksums, a private directory, untrusted files refused) are the
// business of the TraceStore a layer above registers (jit/trace_store.cpp, on the kernel
// cache's file format); the tracer only sees payloads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/backend.h"

namespace kiln::tracer {

inline constexpr uint32_t kFormatVersion = 2;  // 2: OpAttrs::reverse

struct StoredTrace {
  std::string anchor_key;  // anchor_key() of the anchor's first op
  TraceOp first;           // the anchor's first op (site 0: per process)
  TraceProgram program;    // the compiled path, from the anchor's first op
};

// This build of kiln: the library file's identity (path, size, modification time) with
// the format version. A rebuilt libkiln is another build.
const std::string& build_id();

// The anchor's key: its first op's stable site key and wiring (guards aside); "" when
// the site has no stable key (C++ ops outside any SiteScope): such anchors are not stored.
std::string anchor_key(const TraceOp& first, const UserSite& site);
// Short hashes naming files: of the site's stable key, of a whole anchor key, of a
// program (its ops, wiring and guards).
uint64_t site_key_hash(const UserSite& site);
uint64_t text_hash(std::string_view text);
uint64_t program_hash(const TraceProgram& program);

std::string encode_stored_trace(const StoredTrace& trace);
// False with the reason in *why when the payload is of another format version or build,
// or malformed.
bool decode_stored_trace(std::string_view payload, StoredTrace* trace, std::string* why);

// Where stored traces live (registered by jit/ at load time; none: warm starts off).
class TraceStore {
 public:
  virtual ~TraceStore() = default;
  // Whether nothing is stored (cheap).
  virtual bool empty() = 0;
  // Whether any stored trace is anchored at a site with this site_key_hash (cheap).
  virtual bool has_site(uint64_t site_hash) = 0;
  // The payloads stored for this anchor, the most recently written first (checksums
  // checked; a refused file is logged once with why and left out).
  virtual std::vector<std::string> load(uint64_t site_hash, const std::string& anchor_key) = 0;
  // Stores a payload (atomically: a reader sees the old file or the new one); failures
  // cost only the entry.
  virtual void save(uint64_t site_hash, const std::string& anchor_key, uint64_t program_hash,
                    const std::string& payload) = 0;
  virtual std::string describe() const = 0;  // its directory, or why it is off
};
void set_trace_store(TraceStore* store);
TraceStore* trace_store();

}  // namespace kiln::tracer
