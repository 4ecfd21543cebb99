#include "tracer/persist.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstring>
#include <stdexcept>

namespace kiln::tracer {
namespace {

constexpr uint64_t kFnvBasis = 1469598103934665603ull;

uint64_t fnv(std::string_view text, uint64_t h = kFnvBasis) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Little-endian fixed-width fields (kiln runs on little-endian hosts only).
class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void i64(int64_t v) { out_.append(reinterpret_cast<const char*>(&v), 8); }
  void i32(int32_t v) { out_.append(reinterpret_cast<const char*>(&v), 4); }
  void str(std::string_view s) {
    i64(static_cast<int64_t>(s.size()));
    out_.append(s);
  }
  void dims(const Dims& d) {
    i32(static_cast<int32_t>(d.size()));
    for (int64_t v : d) i64(v);
  }
  void device(const Device& d) {
    u8(static_cast<uint8_t>(d.type));
    i32(d.index);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  int64_t i64() {
    int64_t v;
    std::memcpy(&v, take(8), 8);
    return v;
  }
  int32_t i32() {
    int32_t v;
    std::memcpy(&v, take(4), 4);
    return v;
  }
  std::string str() {
    const int64_t n = i64();
    if (n < 0 || static_cast<uint64_t>(n) > in_.size() - at_) throw std::runtime_error("truncated");
    return std::string(take(static_cast<size_t>(n)), static_cast<size_t>(n));
  }
  int32_t count(int32_t most) {
    const int32_t n = i32();
    if (n < 0 || n > most) throw std::runtime_error("a count out of range");
    return n;
  }
  Dims dims() {
    Dims d(static_cast<size_t>(count(64)));
    for (int64_t& v : d) v = i64();
    return d;
  }
  Device device() {
    const uint8_t type = u8();
    const int32_t index = i32();
    if (type > static_cast<uint8_t>(DeviceType::CUDA)) throw std::runtime_error("a bad device");
    return Device(static_cast<DeviceType>(type), index);
  }
  DType dtype() {
    const uint8_t v = u8();
    if (v >= kNumDTypes) throw std::runtime_error("a bad dtype");
    return static_cast<DType>(v);
  }
  bool done() const { return at_ == in_.size(); }

 private:
  const char* take(size_t n) {
    if (n > in_.size() - at_) throw std::runtime_error("truncated");
    const char* p = in_.data() + at_;
    at_ += n;
    return p;
  }
  std::string_view in_;
  size_t at_ = 0;
};

void put_attrs(Writer& w, const OpAttrs& a) {
  w.dims(a.dims);
  for (int64_t v : {a.dim, a.start, a.end, a.step, a.kernel[0], a.kernel[1], a.stride[0],
                    a.stride[1], a.padding[0], a.padding[1], a.correction, a.count})
    w.i64(v);
  for (bool b : {a.keepdim, a.scalar_first, a.has_min, a.has_max, a.approximate_tanh, a.descending,
                 a.stable, a.replacement, a.causal, a.reverse})
    w.u8(b);
  w.u8(static_cast<uint8_t>(a.dtype));
  w.device(a.device);
}

OpAttrs get_attrs(Reader& r) {
  OpAttrs a;
  a.dims = r.dims();
  for (int64_t* v : {&a.dim, &a.start, &a.end, &a.step, &a.kernel[0], &a.kernel[1], &a.stride[0],
                     &a.stride[1], &a.padding[0], &a.padding[1], &a.correction, &a.count})
    *v = r.i64();
  for (bool* b : {&a.keepdim, &a.scalar_first, &a.has_min, &a.has_max, &a.approximate_tanh,
                  &a.descending, &a.stable, &a.replacement, &a.causal, &a.reverse})
    *b = r.u8() != 0;
  a.dtype = r.dtype();
  a.device = r.device();
  return a;
}

void put_ref(Writer& w, const InputRef& ref) {
  w.u8(static_cast<uint8_t>(ref.kind));
  w.i32(ref.index);
}

InputRef get_ref(Reader& r) {
  InputRef ref;
  const uint8_t kind = r.u8();
  if (kind > 1) throw std::runtime_error("a bad input reference");
  ref.kind = static_cast<InputRef::Kind>(kind);
  ref.index = r.i32();
  return ref;
}

// The wiring (guards: with_guards) and output metadata of an op; never its site.
void put_op(Writer& w, const TraceOp& op, bool with_guards) {
  w.i32(static_cast<int32_t>(op.op));
  put_attrs(w, op.attrs);
  w.i32(static_cast<int32_t>(op.inputs.size()));
  for (const InputRef& in : op.inputs) put_ref(w, in);
  w.i32(static_cast<int32_t>(op.scalar_kinds.size()));
  for (Scalar::Kind k : op.scalar_kinds) w.u8(static_cast<uint8_t>(k));
  w.u8(op.in_place);
  put_ref(w, op.target);
  if (!with_guards) return;
  w.i32(static_cast<int32_t>(op.new_guards.size()));
  for (const TensorGuard& g : op.new_guards) {
    w.u8(static_cast<uint8_t>(g.dtype));
    w.device(g.device);
    w.dims(g.sizes);
    w.dims(g.strides);
    w.i32(g.alias_of);
  }
  w.dims(op.meta.sizes);
  w.dims(op.meta.strides);
  w.i64(op.meta.offset);
  w.u8(static_cast<uint8_t>(op.meta.dtype));
  w.device(op.meta.device);
}

TraceOp get_op(Reader& r) {
  TraceOp op;
  const int32_t id = r.i32();
  if (id < 0 || id >= static_cast<int32_t>(kNumOps)) throw std::runtime_error("a bad op id");
  op.op = static_cast<OpId>(id);
  op.attrs = get_attrs(r);
  for (int32_t n = r.count(4096); n > 0; --n) op.inputs.push_back(get_ref(r));
  for (int32_t n = r.count(4096); n > 0; --n) {
    const uint8_t k = r.u8();
    if (k > static_cast<uint8_t>(Scalar::Kind::Float)) throw std::runtime_error("a bad scalar");
    op.scalar_kinds.push_back(static_cast<Scalar::Kind>(k));
  }
  op.in_place = r.u8() != 0;
  op.target = get_ref(r);
  for (int32_t n = r.count(4096); n > 0; --n) {
    TensorGuard g;
    g.dtype = r.dtype();
    g.device = r.device();
    g.sizes = r.dims();
    g.strides = r.dims();
    g.alias_of = r.i32();
    op.new_guards.push_back(std::move(g));
  }
  op.meta.sizes = r.dims();
  op.meta.strides = r.dims();
  op.meta.offset = r.i64();
  op.meta.dtype = r.dtype();
  op.meta.device = r.device();
  return op;
}

std::string hex16(uint64_t v) {
  static const char* hex = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = hex[v & 0xf];
  return s;
}

// Checks that references point where they may: a value of an earlier op, an external
// slot below the program's count.
void check_program(const TraceProgram& p) {
  int externals = 0, scalars = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const TraceOp& op = p.ops[i];
    externals += static_cast<int>(op.new_guards.size());
    scalars += static_cast<int>(op.scalar_kinds.size());
    auto ok = [&](const InputRef& ref) {
      return ref.kind == InputRef::Kind::Value ? ref.index >= 0 && ref.index < static_cast<int>(i)
                                               : ref.index >= 0 && ref.index < externals;
    };
    for (const InputRef& in : op.inputs)
      if (!ok(in)) throw std::runtime_error("an input reference out of range");
    if (op.in_place && !ok(op.target)) throw std::runtime_error("a target out of range");
  }
  if (externals != p.num_externals || scalars != p.num_scalars || p.live.size() != p.ops.size())
    throw std::runtime_error("inconsistent counts");
}

}  // namespace

const std::string& build_id() {
  static const std::string id = [] {
    std::string s = "format " + std::to_string(kFormatVersion);
    Dl_info info;
    struct stat st;
    if (dladdr(reinterpret_cast<const void*>(&build_id), &info) != 0 && info.dli_fname &&
        stat(info.dli_fname, &st) == 0) {
      s += std::string(", ") + info.dli_fname + ", " + std::to_string(st.st_size) + " bytes, " +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    } else {
      s += ", built " __DATE__ " " __TIME__;
    }
    return s;
  }();
  return id;
}

std::string anchor_key(const TraceOp& first, const UserSite& site) {
  const std::string stable = site.stable_key();
  if (stable.empty()) return "";
  Writer w;
  put_op(w, first, false);
  return stable + "@" + hex16(fnv(w.take()));
}

uint64_t site_key_hash(const UserSite& site) { return fnv(site.stable_key()); }
uint64_t text_hash(std::string_view text) { return fnv(text); }

uint64_t program_hash(const TraceProgram& program) {
  Writer w;
  for (const TraceOp& op : program.ops) put_op(w, op, true);
  return fnv(w.take());
}

std::string encode_stored_trace(const StoredTrace& trace) {
  Writer w;
  w.i32(static_cast<int32_t>(kFormatVersion));
  w.str(build_id());
  w.str(trace.anchor_key);
  put_op(w, trace.first, true);
  w.i32(static_cast<int32_t>(trace.program.ops.size()));
  for (const TraceOp& op : trace.program.ops) put_op(w, op, true);
  w.i32(trace.program.num_externals);
  w.i32(trace.program.num_scalars);
  for (bool live : trace.program.live) w.u8(live);
  return w.take();
}

bool decode_stored_trace(std::string_view payload, StoredTrace* trace, std::string* why) {
  try {
    Reader r(payload);
    const int32_t version = r.i32();
    if (version != static_cast<int32_t>(kFormatVersion)) {
      *why = "format version " + std::to_string(version) + ", this build reads version " +
             std::to_string(kFormatVersion);
      return false;
    }
    const std::string build = r.str();
    if (build != build_id()) {
      *why = "written by another build of kiln (" + build + "; this one: " + build_id() + ")";
      return false;
    }
    StoredTrace t;
    t.anchor_key = r.str();
    t.first = get_op(r);
    const int32_t n = r.count(1 << 20);
    if (n == 0) throw std::runtime_error("an empty trace");
    for (int32_t i = 0; i < n; ++i) t.program.ops.push_back(get_op(r));
    t.program.num_externals = r.i32();
    t.program.num_scalars = r.i32();
    for (int32_t i = 0; i < n; ++i) t.program.live.push_back(r.u8() != 0);
    if (!r.done()) throw std::runtime_error("trailing bytes");
    check_program(t.program);
    *trace = std::move(t);
    return true;
  } catch (const std::exception& e) {
    *why = std::string("malformed (") + e.what() + ")";
    return false;
  }
}

namespace {
TraceStore* g_store = nullptr;
}  // namespace

void set_trace_store(TraceStore* store) { g_store = store; }
TraceStore* trace_store() { return g_store; }

}  // namespace kiln::tracer
