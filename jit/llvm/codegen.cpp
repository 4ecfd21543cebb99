#include "jit/llvm/codegen.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "jit/llvm/ir_types.h"
#include "jit/llvm/row_cache.h"
#include "jit/llvm/scalar_functions.h"

namespace kiln::jit::llvm_backend {

using llvm::BasicBlock;
using llvm::Function;
using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;

namespace {

class Emitter : IrDTypes {
 public:
  Emitter(const Kernel& k, llvm::LLVMContext& ctx, llvm::Module& m)
      : IrDTypes(ctx), k_(k), ctx_(ctx), m_(m) {}

  void emit(const std::string& name) {
    Type* i64 = b_.getInt64Ty();
    Type* ptr = llvm::PointerType::getUnqual(ctx_);
    const size_t nops = k_.operands.size();

    // The body takes each operand as a noalias pointer; the entry point unpacks the array.
    std::vector<Type*> params(nops, ptr);
    params.insert(params.end(), {ptr, ptr, ptr, i64, i64});
    Function* body = Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                      Function::InternalLinkage, name + "_body", m_);
    body->addFnAttr(llvm::Attribute::AlwaysInline);
    body->addFnAttr(llvm::Attribute::NoUnwind);
    for (size_t i = 0; i < nops; ++i) body->addParamAttr(i, llvm::Attribute::NoAlias);
    Function* entry = Function::Create(
        llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, ptr, i64, i64}, false),
        Function::ExternalLinkage, name, m_);
    entry->addFnAttr(llvm::Attribute::NoUnwind);
    {
      b_.SetInsertPoint(BasicBlock::Create(ctx_, "entry", entry));
      std::vector<Value*> args;
      for (size_t i = 0; i < nops; ++i)
        args.push_back(b_.CreateLoad(ptr, b_.CreateConstGEP1_64(ptr, entry->getArg(0), i)));
      for (int a = 1; a < 6; ++a) args.push_back(entry->getArg(a));
      b_.CreateCall(body, args);
      b_.CreateRetVoid();
    }

    fn_ = body;
    b_.SetInsertPoint(BasicBlock::Create(ctx_, "entry", body));
    for (size_t i = 0; i < nops; ++i) base_.push_back(body->getArg(i));
    Value* shape_arg = body->getArg(nops);
    Value* strides_arg = body->getArg(nops + 1);
    scalars_ = body->getArg(nops + 2);
    Value* begin = body->getArg(nops + 3);
    Value* end = body->getArg(nops + 4);
    const int rank = k_.rank;
    for (int d = 0; d < rank; ++d)
      shape_.push_back(b_.CreateLoad(i64, b_.CreateConstGEP1_64(i64, shape_arg, d)));
    strides_.resize(nops);
    for (size_t o = 0; o < nops; ++o)
      for (int d = 0; d < rank; ++d)
        strides_[o].push_back(
            b_.CreateLoad(i64, b_.CreateConstGEP1_64(i64, strides_arg, o * rank + d)));
    cols_ = shape_[rank - 1];
    // Invariant nodes once, at entry.
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (k_.nodes[i].level == Level::Invariant) invariant_[i] = value(static_cast<int>(i));

    if (k_.kind == Kernel::Kind::Pointwise)
      emit_pointwise(begin, end);
    else
      emit_rows(begin, end);
    b_.CreateRetVoid();
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyFunction(*body, &os) || llvm::verifyFunction(*entry, &os))
      throw std::runtime_error("[jit] invalid LLVM IR: " + os.str());
  }

 private:
  // ---- pointwise math: a call of the op's functor, compiled from ops/pointwise_math.h
  // to bitcode at build time; jit/llvm/scalar_functions links it in before the passes
  // run, which inline it (and the loop vectorizer then maps exp/log/sin/cos/pow to
  // libmvec).
  Value* compute(const KNode& n, Value* a, Value* b, Value* c) {
    if (n.op == KOp::Where) return b_.CreateSelect(a, b, c);
    if (n.op != KOp::Unary && n.op != KOp::Binary)
      throw std::runtime_error(std::string("[jit] no code for ") + node_name(n));
    const DType operand = k_.nodes[n.in[0]].dtype;
    if (n.op == KOp::Binary && ctype(k_.nodes[n.in[1]].dtype) != ctype(operand))
      throw std::runtime_error("[jit] " + node_name(n) + " on operands of two types");
    Type* t = ctype(operand);
    std::vector<Type*> params(n.op == KOp::Unary ? 1 : 2, t);
    llvm::FunctionCallee f =
        m_.getOrInsertFunction(scalar_function_name(n.fn, n.approximate, operand),
                               llvm::FunctionType::get(ctype(n.dtype), params, false));
    if (n.op == KOp::Unary) return b_.CreateCall(f, {a});
    return b_.CreateCall(f, {a, b});
  }

  // ---- values by level. Full-level values live in the current loop body (memo_),
  // row-level ones in the current row (row_), invariant ones at entry (invariant_).
  Value* value(int i) {
    const KNode& n = k_.nodes[i];
    if (auto c = row_cache_.find(i); c != row_cache_.end() && pass_ > c->second.first_pass) {
      auto it = memo_.find(i);
      if (it != memo_.end()) return it->second;
      Value* v = b_.CreateLoad(ctype(n.dtype), b_.CreateGEP(ctype(n.dtype), c->second.buffer, j_));
      memo_[i] = v;
      return v;
    }
    if (n.level == Level::Invariant) {
      auto it = invariant_.find(i);
      if (it != invariant_.end()) return it->second;
    } else if (n.level == Level::Row && k_.kind == Kernel::Kind::Row) {
      auto it = row_.find(i);
      if (it != row_.end()) return it->second;
    } else {
      auto it = memo_.find(i);
      if (it != memo_.end()) return it->second;
    }
    Value* v;
    switch (n.op) {
      case KOp::Load:
        v = load(n.dtype, address(n.operand));
        break;
      case KOp::Scalar: {
        Value* raw = b_.CreateLoad(b_.getInt64Ty(),
                                   b_.CreateConstGEP1_64(b_.getInt64Ty(), scalars_, n.slot));
        v = n.dtype == DType::Float64 ? b_.CreateBitCast(raw, b_.getDoubleTy())
            : n.dtype == DType::Bool  ? b_.CreateICmpNE(raw, b_.getInt64(0))
                                      : raw;
        break;
      }
      case KOp::Const:
        v = flt(n.dtype)
                ? fconst(ctype(n.dtype), n.value)
                : static_cast<Value*>(llvm::ConstantInt::get(
                      ctype(n.dtype), static_cast<uint64_t>(static_cast<int64_t>(n.value))));
        break;
      case KOp::ReduceCount:
        v = b_.CreateSIToFP(cols_, b_.getDoubleTy());
        break;
      case KOp::Random:
        v = random(n);
        break;
      case KOp::Cast:
        v = convert(value(n.in[0]), k_.nodes[n.in[0]].dtype, n.dtype);
        break;
      default: {
        if (is_reduction(n.op)) throw std::runtime_error("[jit] reduction used before its pass");
        Value* a = value(n.in[0]);
        Value* b = n.in[1] >= 0 ? value(n.in[1]) : nullptr;
        Value* c = n.in[2] >= 0 ? value(n.in[2]) : nullptr;
        v = compute(n, a, b, c);
      }
    }
    if (n.level == Level::Invariant)
      invariant_[i] = v;
    else if (n.level == Level::Row && k_.kind == Kernel::Kind::Row)
      row_[i] = v;
    else
      memo_[i] = v;
    return v;
  }

  // Address of the current element of an operand: its row base plus j * inner stride.
  Value* address(int operand) {
    const KOperand& o = k_.operands[operand];
    Value* idx = nullptr;
    if (o.inner == InnerStride::Contiguous)
      idx = j_;
    else if (o.inner == InnerStride::Strided)
      idx = b_.CreateMul(j_, strides_[operand][k_.rank - 1]);
    if (o.row_level || !idx) return row_base_[operand];
    return b_.CreateGEP(stype(o.dtype), row_base_[operand], idx);
  }

  // Element index of an index-only operand (a Random node's): its row offset plus j times
  // its inner stride, the offset a load of it would use.
  Value* element_index(int operand) {
    const KOperand& o = k_.operands[operand];
    if (o.row_level || o.inner == InnerStride::Broadcast) return row_off_[operand];
    Value* idx =
        o.inner == InnerStride::Contiguous ? j_ : b_.CreateMul(j_, strides_[operand][k_.rank - 1]);
    return b_.CreateAdd(row_off_[operand], idx);
  }

  // rand / randn of a Random node: the eager kernels' draw, linked from the bitcode; a
  // buffered rand (see fill_random) loads its value from the chunk's buffer.
  Value* random(const KNode& n) {
    Type* i64 = b_.getInt64Ty();
    Value* index = element_index(n.operand);
    const int node = static_cast<int>(&n - k_.nodes.data());
    if (auto it = rand_bufs_.find(node); it != rand_bufs_.end() && it->second.base) {
      const RandBuffer& rb = it->second;
      return b_.CreateLoad(b_.getDoubleTy(),
                           b_.CreateGEP(b_.getDoubleTy(), rb.buffer, b_.CreateSub(index, rb.base)));
    }
    Value* seed = value(n.in[0]);
    Value* offset = value(n.in[1]);
    if (n.fn == OpId::Randn) {
      llvm::FunctionCallee f =
          m_.getOrInsertFunction("kiln_fn_philox_randn",
                                 llvm::FunctionType::get(b_.getDoubleTy(), {i64, i64, i64}, false));
      return b_.CreateCall(f, {seed, offset, index});
    }
    llvm::FunctionCallee f = m_.getOrInsertFunction(
        "kiln_fn_philox_rand",
        llvm::FunctionType::get(b_.getDoubleTy(), {i64, i64, i64, b_.getInt32Ty()}, false));
    return b_.CreateCall(f, {seed, offset, index, b_.getInt32(static_cast<uint32_t>(n.value))});
  }

  // ---- rand buffers. Elements 4c..4c+3 of a rand of at most 31 bits share Philox draw c
  // (ops/philox.h), but a loop computing each element's value on its own (random())
  // makes the draw four times, vectorized or not. So an inner loop that reads such a
  // rand at contiguous element indices runs in chunks of kRandChunk elements: per chunk,
  // a function of the kernel (one per rand, not inlined: the passes of a row kernel share
  // its code) makes the chunk's draws, each once, into a buffer on the stack, and the
  // element loop loads the values from there. A row kernel's later passes over a chunk
  // already in the buffer (a row of at most kRandChunk elements) do not draw again.
  // (Initially the buffer holds the draws [0, 0): none.)
  static constexpr int64_t kRandChunk = 256;
  static constexpr int kRandDrawWidth = 8;  // draws per vector (the cost model says 1)
  struct RandBuffer {
    Value* buffer = nullptr;  // kRandChunk + 8 doubles, in the entry block
    Value* drawn = nullptr;   // 2 x i64 in the entry block: the draws [c0, c1) in the buffer
    Function* fill = nullptr;
    Value* base = nullptr;  // element index of buffer[0] in the current chunk (null: none)
  };

  bool bufferable(const KNode& n) const {
    if (n.op != KOp::Random || n.fn != OpId::Rand || n.value > 31 || n.level != Level::Full)
      return false;
    const KOperand& o = k_.operands[n.operand];
    return o.inner == InnerStride::Contiguous && !o.row_level;
  }

  // The bufferable rands a loop computing `roots` evaluates per element: the Full-level
  // nodes below them, not through reductions (their values are the row's).
  std::vector<int> buffered_randoms(const std::vector<int>& roots) const {
    std::vector<uint8_t> seen(k_.nodes.size(), 0);
    std::vector<int> stack(roots), out;
    while (!stack.empty()) {
      const int i = stack.back();
      stack.pop_back();
      if (i < 0 || seen[i]) continue;
      seen[i] = 1;
      const KNode& n = k_.nodes[i];
      if (n.level != Level::Full || is_reduction(n.op)) continue;
      if (bufferable(n)) out.push_back(i);
      for (int32_t a : n.in) stack.push_back(a);
    }
    return out;
  }

  // fill(seed, offset, c0, c1, buffer): buffer[4 (c - c0) + w] = the value of element
  // 4c + w, for the draws c in [c0, c1).
  Function* make_fill(const KNode& n, const std::string& name) {
    Type* i64 = b_.getInt64Ty();
    Type* f64 = b_.getDoubleTy();
    Type* ptr = llvm::PointerType::getUnqual(ctx_);
    Function* f =
        Function::Create(llvm::FunctionType::get(b_.getVoidTy(), {i64, i64, i64, i64, ptr}, false),
                         Function::InternalLinkage, name, m_);
    f->addFnAttr(llvm::Attribute::NoInline);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    f->addParamAttr(4, llvm::Attribute::NoAlias);
    const IRBuilder<>::InsertPoint saved = b_.saveIP();
    Function* const outer = fn_;
    fn_ = f;
    b_.SetInsertPoint(BasicBlock::Create(ctx_, "entry", f));
    Value *seed = f->getArg(0), *offset = f->getArg(1), *c0 = f->getArg(2);
    llvm::FunctionCallee rand = m_.getOrInsertFunction(
        "kiln_fn_philox_rand",
        llvm::FunctionType::get(f64, {i64, i64, i64, b_.getInt32Ty()}, false));
    Value* bits = b_.getInt32(static_cast<uint32_t>(n.value));
    Value* c;
    loop(
        c0, f->getArg(3), {},
        [&](const std::vector<Value*>&) {
          // Four calls whose inlined draws are one expression, which the passes merge
          // into one draw (one call returning the four values would come packed into
          // vector code from the bitcode's own compile, which the loop vectorizer cannot
          // widen).
          Value* first = b_.CreateShl(c, 2);
          Value* slot = b_.CreateShl(b_.CreateSub(c, c0), 2);
          for (int w = 0; w < 4; ++w)
            b_.CreateStore(
                b_.CreateCall(rand, {seed, offset, b_.CreateOr(first, b_.getInt64(w)), bits}),
                b_.CreateGEP(f64, f->getArg(4), b_.CreateAdd(slot, b_.getInt64(w))));
          return std::vector<Value*>{};
        },
        &c, kRandDrawWidth);
    b_.CreateRetVoid();
    fn_ = outer;
    b_.restoreIP(saved);
    return f;
  }

  // Rand `node`'s buffer for the elements at loop indices [jb, je) of the current row:
  // whole draws, from the draw of the first to that of the last, unless already there.
  void fill_random(int node, Value* jb, Value* je) {
    const KNode& n = k_.nodes[node];
    Type* i64 = b_.getInt64Ty();
    RandBuffer& rb = rand_bufs_[node];
    if (!rb.buffer) {
      IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
      llvm::AllocaInst* a = entry.CreateAlloca(b_.getDoubleTy(), b_.getInt64(kRandChunk + 8));
      a->setAlignment(llvm::Align(32));
      rb.buffer = a;
      rb.drawn = entry.CreateAlloca(i64, b_.getInt64(2));
      entry.CreateStore(b_.getInt64(0), rb.drawn);
      entry.CreateStore(b_.getInt64(0), entry.CreateConstGEP1_64(i64, rb.drawn, 1));
      rb.fill = make_fill(n, fn_->getName().str() + "_rand" + std::to_string(node));
    }
    Value* first = b_.CreateAdd(row_off_[n.operand], jb);
    Value* last = b_.CreateAdd(row_off_[n.operand], b_.CreateSub(je, b_.getInt64(1)));
    Value* c0 = b_.CreateLShr(first, 2);
    Value* c1 = b_.CreateAdd(b_.CreateLShr(last, 2), b_.getInt64(1));
    // Already there: the buffer starts at c0 and reaches c1 (a row kernel's later pass).
    Value* drawn_end = b_.CreateConstGEP1_64(i64, rb.drawn, 1);
    Value* there = b_.CreateAnd(b_.CreateICmpEQ(b_.CreateLoad(i64, rb.drawn), c0),
                                b_.CreateICmpSGE(b_.CreateLoad(i64, drawn_end), c1));
    BasicBlock* draw = BasicBlock::Create(ctx_, "rand.draw", fn_);
    BasicBlock* done = BasicBlock::Create(ctx_, "rand.done", fn_);
    b_.CreateCondBr(there, done, draw);
    b_.SetInsertPoint(draw);
    b_.CreateCall(rb.fill, {value(n.in[0]), value(n.in[1]), c0, c1, rb.buffer});
    b_.CreateStore(c0, rb.drawn);
    b_.CreateStore(c1, drawn_end);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    rb.base = b_.CreateShl(c0, 2);
  }

  // loop() over the elements [lo, hi) of a row, whose body evaluates `roots`: in chunks
  // with the rand buffers filled where it reads bufferable rands. `body` sets j_ itself
  // from the index it is given.
  std::vector<Value*> element_loop(
      Value* lo, Value* hi, const std::vector<Value*>& init, const std::vector<int>& roots,
      const std::function<std::vector<Value*>(Value*, const std::vector<Value*>&)>& body) {
    const std::vector<int> rands = buffered_randoms(roots);
    Value* j;
    auto inner = [&](const std::vector<Value*>& acc) { return body(j, acc); };
    if (rands.empty()) return loop(lo, hi, init, inner, &j);
    Value* jb;
    Value* je = nullptr;
    std::vector<Value*> out = loop(
        lo, hi, init,
        [&](const std::vector<Value*>& acc) {
          Value* want = b_.CreateAdd(jb, b_.getInt64(kRandChunk));
          je = b_.CreateSelect(b_.CreateICmpSLT(want, hi), want, hi);
          for (int r : rands) fill_random(r, jb, je);
          return loop(jb, je, acc, inner, &j);
        },
        &jb, 1, &je);
    for (int r : rands) rand_bufs_[r].base = nullptr;
    return out;
  }

  // Row bases: each operand's pointer at (row, 0), from the row index over the outer dims.
  void compute_row_bases(Value* row) {
    row_base_.assign(k_.operands.size(), nullptr);
    std::vector<Value*> off(k_.operands.size(), b_.getInt64(0));
    Value* r = row;
    for (int d = k_.rank - 2; d >= 0; --d) {
      Value* idx = d == 0 ? r : b_.CreateURem(r, shape_[d]);
      if (d > 0) r = b_.CreateUDiv(r, shape_[d]);
      for (size_t o = 0; o < k_.operands.size(); ++o)
        off[o] = b_.CreateAdd(off[o], b_.CreateMul(idx, strides_[o][d]));
    }
    for (size_t o = 0; o < k_.operands.size(); ++o)
      if (!k_.operands[o].index_only)
        row_base_[o] = b_.CreateGEP(stype(k_.operands[o].dtype), base_[o], off[o]);
    row_off_ = std::move(off);
  }

  // A counted loop [lo, hi) with loop-carried values; body gets j and the carried values
  // and returns their updates. Returns the carried values after the loop. width: the
  // vector width asked of the loop vectorizer (0: its choice; 1: scalar). With next_j, the
  // body sets *next_j to the next index (> j) instead of j + 1.
  std::vector<Value*> loop(
      Value* lo, Value* hi, const std::vector<Value*>& init,
      const std::function<std::vector<Value*>(const std::vector<Value*>&)>& body, Value** j_out,
      int width = 0, Value** next_j = nullptr) {
    BasicBlock* pre = b_.GetInsertBlock();
    BasicBlock* head = BasicBlock::Create(ctx_, "loop", fn_);
    BasicBlock* exit = BasicBlock::Create(ctx_, "loop.exit", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(lo, hi), head, exit);
    b_.SetInsertPoint(head);
    llvm::PHINode* j = b_.CreatePHI(b_.getInt64Ty(), 2);
    j->addIncoming(lo, pre);
    std::vector<llvm::PHINode*> phis;
    std::vector<Value*> carried;
    for (Value* v : init) {
      llvm::PHINode* p = b_.CreatePHI(v->getType(), 2);
      p->addIncoming(v, pre);
      phis.push_back(p);
      carried.push_back(p);
    }
    *j_out = j;
    std::vector<Value*> next = body(carried);
    // The next index: j + 1, or what the body left in *next_j (a chunk's end).
    Value* jn = next_j ? *next_j : b_.CreateAdd(j, b_.getInt64(1), "", true, true);
    BasicBlock* latch = b_.GetInsertBlock();
    llvm::BranchInst* br = b_.CreateCondBr(b_.CreateICmpSLT(jn, hi), head, exit);
    if (width > 0) {  // 1: scalar (an outer loop whose body holds the vector loops)
      std::vector<llvm::Metadata*> md_ops{nullptr};
      md_ops.push_back(
          llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.vectorize.width"),
                                   llvm::ConstantAsMetadata::get(b_.getInt32(width))}));
      if (width > 1)
        md_ops.push_back(
            llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.vectorize.enable"),
                                     llvm::ConstantAsMetadata::get(b_.getTrue())}));
      llvm::MDNode* md = llvm::MDNode::getDistinct(ctx_, md_ops);
      md->replaceOperandWith(0, md);
      br->setMetadata(llvm::LLVMContext::MD_loop, md);
    }
    j->addIncoming(jn, latch);
    for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], latch);
    b_.SetInsertPoint(exit);
    std::vector<Value*> out;
    for (size_t i = 0; i < init.size(); ++i) {
      llvm::PHINode* p = b_.CreatePHI(init[i]->getType(), 2);
      p->addIncoming(init[i], pre);
      p->addIncoming(next[i], latch);
      out.push_back(p);
    }
    return out;
  }

  void store(const KStore& s) {
    const KOperand& o = k_.operands[s.operand];
    b_.CreateStore(to_storage(o.dtype, value(s.node)), address(s.operand));
  }

  // ---- pointwise: [begin, end) elements, row segment by row segment.
  void emit_pointwise(Value* begin, Value* end) {
    // The outer loop over row segments is a while loop: carry pos.
    BasicBlock* pre = b_.GetInsertBlock();
    BasicBlock* head = BasicBlock::Create(ctx_, "seg", fn_);
    BasicBlock* exit = BasicBlock::Create(ctx_, "seg.exit", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(begin, end), head, exit);
    b_.SetInsertPoint(head);
    llvm::PHINode* pos = b_.CreatePHI(b_.getInt64Ty(), 2);
    pos->addIncoming(begin, pre);
    Value* row = b_.CreateUDiv(pos, cols_);
    Value* j0 = b_.CreateSub(pos, b_.CreateMul(row, cols_));
    Value* left = b_.CreateSub(end, pos);
    Value* room = b_.CreateSub(cols_, j0);
    Value* seg = b_.CreateSelect(b_.CreateICmpSLT(left, room), left, room);
    Value* j1 = b_.CreateAdd(j0, seg);
    compute_row_bases(row);
    std::vector<int> roots;
    for (const KStore& s : k_.stores) roots.push_back(s.node);
    element_loop(j0, j1, {}, roots, [&](Value* j, const std::vector<Value*>&) {
      j_ = j;
      memo_.clear();
      for (const KStore& s : k_.stores) store(s);
      return std::vector<Value*>{};
    });
    Value* next = b_.CreateAdd(pos, seg);
    BasicBlock* latch = b_.GetInsertBlock();
    b_.CreateCondBr(b_.CreateICmpSLT(next, end), head, exit);
    pos->addIncoming(next, latch);
    b_.SetInsertPoint(exit);
  }

  // Row-level nodes a loop body will need, emitted before the loop.
  void prepare_rows(int i, std::vector<uint8_t>& seen) {
    if (seen[i]) return;
    seen[i] = 1;
    const KNode& n = k_.nodes[i];
    if (n.level == Level::Row) {
      if (!is_reduction(n.op)) value(i);
      return;
    }
    if (n.level != Level::Full || is_reduction(n.op)) return;
    for (int32_t a : n.in)
      if (a >= 0) prepare_rows(a, seen);
  }

  Value* reduce_init(const KNode& n) {
    Type* t = ctype(n.dtype);
    if (n.op == KOp::ReduceSum)
      return flt(n.dtype) ? fconst(t, 0.0) : static_cast<Value*>(llvm::ConstantInt::get(t, 0));
    const bool mx = n.op == KOp::ReduceMax;
    if (flt(n.dtype)) return fconst(t, mx ? -INFINITY : INFINITY);
    const unsigned bits = t->getIntegerBitWidth();
    return llvm::ConstantInt::get(
        ctx_, mx ? llvm::APInt::getSignedMinValue(bits) : llvm::APInt::getSignedMaxValue(bits));
  }
  Value* reduce_step(const KNode& n, Value* acc, Value* x) {
    const bool f = flt(n.dtype);
    if (n.op == KOp::ReduceSum) {
      if (!f) return b_.CreateAdd(acc, x);
      llvm::IRBuilderBase::FastMathFlagGuard guard(b_);
      llvm::FastMathFlags fmf;
      fmf.setAllowReassoc();
      b_.setFastMathFlags(fmf);
      return b_.CreateFAdd(acc, x);
    }
    const bool mx = n.op == KOp::ReduceMax;
    if (f)
      return b_.CreateBinaryIntrinsic(mx ? llvm::Intrinsic::maximum : llvm::Intrinsic::minimum, acc,
                                      x);
    return b_.CreateBinaryIntrinsic(mx ? llvm::Intrinsic::smax : llvm::Intrinsic::smin, acc, x);
  }

  // ---- row cache (jit/llvm/row_cache.h): a costly node's values, per row, in a buffer
  struct RowCacheEntry {
    int first_pass = 0;
    Value* buffer = nullptr;
  };

  // ---- rows: [begin, end) rows; per row, one pass per reduction stage, then the stores.
  void emit_rows(Value* begin, Value* end) {
    std::map<int, RowCacheEntry> cache;
    for (const auto& [node, first_pass] : choose_row_cache(k_, row_pass_roots(k_)))
      cache[node] = RowCacheEntry{first_pass, nullptr};
    if (cache.empty()) {
      emit_row_loops(begin, end);
      return;
    }
    BasicBlock* cached = BasicBlock::Create(ctx_, "rows.cached", fn_);
    BasicBlock* plain = BasicBlock::Create(ctx_, "rows.plain", fn_);
    BasicBlock* done = BasicBlock::Create(ctx_, "rows.done", fn_);
    b_.CreateCondBr(b_.CreateICmpSLE(cols_, b_.getInt64(kRowCacheCols)), cached, plain);
    b_.SetInsertPoint(cached);
    for (auto& [node, entry] : cache) {
      llvm::AllocaInst* a = b_.CreateAlloca(ctype(k_.nodes[node].dtype), cols_);
      a->setAlignment(llvm::Align(64));
      entry.buffer = a;
    }
    row_cache_ = cache;
    emit_row_loops(begin, end);
    row_cache_.clear();
    b_.CreateBr(done);
    b_.SetInsertPoint(plain);
    emit_row_loops(begin, end);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  void emit_row_loops(Value* begin, Value* end) {
    Value* r;
    loop(
        begin, end, {},
        [&](const std::vector<Value*>&) {
          row_.clear();
          compute_row_bases(r);
          const int stages = k_.stages();
          pass_ = -1;
          for (int s = 1; s <= stages; ++s) {
            std::vector<int> reds;
            for (size_t i = 0; i < k_.nodes.size(); ++i)
              if (is_reduction(k_.nodes[i].op) && k_.nodes[i].stage == s)
                reds.push_back(static_cast<int>(i));
            if (reds.empty()) continue;
            ++pass_;
            std::vector<uint8_t> seen(k_.nodes.size(), 0);
            for (int i : reds) prepare_rows(k_.nodes[i].in[0], seen);
            std::vector<Value*> init;
            for (int i : reds) init.push_back(reduce_init(k_.nodes[i]));
            std::vector<int> roots;
            for (int i : reds) roots.push_back(k_.nodes[i].in[0]);
            std::vector<Value*> done = element_loop(
                b_.getInt64(0), cols_, init, roots, [&](Value* j, const std::vector<Value*>& acc) {
                  j_ = j;
                  memo_.clear();
                  std::vector<Value*> next;
                  for (size_t q = 0; q < reds.size(); ++q)
                    next.push_back(
                        reduce_step(k_.nodes[reds[q]], acc[q], value(k_.nodes[reds[q]].in[0])));
                  for (const auto& [node, entry] : row_cache_)
                    if (entry.first_pass == pass_)
                      b_.CreateStore(value(node),
                                     b_.CreateGEP(ctype(k_.nodes[node].dtype), entry.buffer, j_));
                  return next;
                });
            for (size_t q = 0; q < reds.size(); ++q) row_[reds[q]] = done[q];
          }
          // Per-row outputs, then the per-element pass.
          ++pass_;
          std::vector<KStore> full;
          for (const KStore& st : k_.stores) {
            if (k_.operands[st.operand].row_level) {
              j_ = b_.getInt64(0);
              memo_.clear();
              store(st);
            } else {
              full.push_back(st);
            }
          }
          if (!full.empty()) {
            std::vector<uint8_t> seen(k_.nodes.size(), 0);
            std::vector<int> roots;
            for (const KStore& st : full) {
              prepare_rows(st.node, seen);
              roots.push_back(st.node);
            }
            element_loop(b_.getInt64(0), cols_, {}, roots,
                         [&](Value* j, const std::vector<Value*>&) {
                           j_ = j;
                           memo_.clear();
                           for (const KStore& st : full) store(st);
                           return std::vector<Value*>{};
                         });
          }
          return std::vector<Value*>{};
        },
        &r, 1);
  }

  const Kernel& k_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  Function* fn_ = nullptr;
  std::vector<Value*> base_, shape_, row_base_;
  std::vector<Value*> row_off_;  // each operand's element offset at (row, 0)
  std::vector<std::vector<Value*>> strides_;
  Value* scalars_ = nullptr;
  Value* cols_ = nullptr;
  Value* j_ = nullptr;
  std::map<int, Value*> invariant_, row_, memo_;
  std::map<int, RandBuffer> rand_bufs_;     // per bufferable Random node
  std::map<int, RowCacheEntry> row_cache_;  // while emitting the cached copy of the rows
  int pass_ = 0;                            // the row pass being emitted (0: the first)
};

}  // namespace

std::unique_ptr<llvm::Module> emit_kernel(const Kernel& kernel, const std::string& name,
                                          llvm::LLVMContext& context) {
  auto module = std::make_unique<llvm::Module>(name, context);
  Emitter(kernel, context, *module).emit(name);
  return module;
}

}  // namespace kiln::jit::llvm_backend
