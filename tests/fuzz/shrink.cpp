#include "shrink.h"

#include <chrono>

#include "../cpp/reference.h"
#include "generator.h"

namespace kfuzz {
namespace {

class Shrinker {
 public:
  Shrinker(const std::function<bool(const Program&)>& fails, const ShrinkBudget& budget)
      : fails_(fails), budget_(budget), start_(std::chrono::steady_clock::now()) {}

  // Keeps candidate as the current program if it is valid and still fails.
  bool attempt(Program& current, const Program& candidate) {
    if (out_of_budget()) return false;
    ++stats.candidates;
    if (!runs_in_all_worlds(candidate) || !fails_(candidate)) return false;
    current = candidate;
    ++stats.accepted;
    return true;
  }

  bool out_of_budget() const {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return stats.candidates >= budget_.max_candidates || seconds >= budget_.max_seconds;
  }

  ShrinkStats stats;

 private:
  const std::function<bool(const Program&)>& fails_;
  ShrinkBudget budget_;
  std::chrono::steady_clock::time_point start_;
};

bool drop_step_chunks(Shrinker& sh, Program& p) {
  bool progress = false;
  for (size_t chunk = std::max<size_t>(p.steps.size() / 2, 1); chunk >= 1; chunk /= 2) {
    for (size_t start = 0; start < p.steps.size() && !sh.out_of_budget();) {
      std::vector<bool> drop(p.steps.size(), false);
      for (size_t i = start; i < std::min(start + chunk, p.steps.size()); ++i) drop[i] = true;
      if (sh.attempt(p, remove_steps(p, drop)))
        progress = true;  // the same start now names the next steps
      else
        start += chunk;
    }
    if (chunk == 1) break;
  }
  return progress;
}

bool shorten_schedule(Shrinker& sh, Program& p) {
  bool progress = false;
  for (size_t i = 0; i < p.schedule.size() && p.schedule.size() > 1;) {
    Program c = p;
    c.schedule.erase(c.schedule.begin() + static_cast<std::ptrdiff_t>(i));
    if (sh.attempt(p, c))
      progress = true;
    else
      ++i;
  }
  return progress;
}

bool simplify_frame(Shrinker& sh, Program& p) {
  bool progress = false;
  if (!p.read_each_iteration) {
    Program c = p;
    c.read_each_iteration = true;
    progress |= sh.attempt(p, c);
  }
  if (p.fresh_inputs) {
    Program c = p;
    c.fresh_inputs = false;
    progress |= sh.attempt(p, c);
  }
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (p.inputs[i].layout != Layout::Contiguous) {
      Program c = p;
      c.inputs[i].layout = Layout::Contiguous;
      progress |= sh.attempt(p, c);
    }
    if (kt::is_float(p.inputs[i].dtype) && p.inputs[i].dtype != DType::Float32) {
      Program c = p;
      c.inputs[i].dtype = DType::Float32;
      progress |= sh.attempt(p, c);
    }
  }
  for (size_t k = 0; k < p.steps.size(); ++k) {
    if (p.steps[k].slot >= 0) {
      Program c = p;
      c.steps[k].slot = -1;
      progress |= sh.attempt(p, c);
    }
    if (p.steps[k].dtype != DType::Float32) {
      Program c = p;
      c.steps[k].dtype = DType::Float32;
      progress |= sh.attempt(p, c);
    }
  }
  return progress;
}

// Smaller sizes: one input's dim at a time, then the same dim of every input that has it.
bool shrink_shapes(Shrinker& sh, Program& p) {
  bool progress = false;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    for (size_t set = 0; set < p.inputs[i].shapes.size(); ++set) {
      for (size_t d = 0; d < p.inputs[i].shapes[set].size(); ++d) {
        for (bool all_inputs : {true, false}) {
          const int64_t n = p.inputs[i].shapes[set][d];
          if (n <= 1) break;
          const size_t from_end = p.inputs[i].shapes[set].size() - d;
          for (int64_t smaller : {int64_t{1}, n / 2, n - 1}) {
            if (smaller >= n || smaller < 1) continue;
            Program c = p;
            for (size_t j = 0; j < c.inputs.size(); ++j) {
              if (!all_inputs && j != i) continue;
              Dims& s = c.inputs[j].shapes[set];
              if (s.size() >= from_end && s[s.size() - from_end] == n)
                s[s.size() - from_end] = smaller;
            }
            if (sh.attempt(p, c)) {
              progress = true;
              break;
            }
          }
        }
      }
    }
  }
  return progress;
}

void renumber(Ref& r, const std::vector<int>& new_value_index) {
  if (!r.input) r.index = new_value_index.at(static_cast<size_t>(r.index));
}

}  // namespace

Program remove_steps(const Program& p, const std::vector<bool>& drop_in) {
  std::vector<bool> drop = drop_in;
  drop.resize(p.steps.size(), false);
  std::vector<bool> value_gone, scalar_gone;
  for (size_t k = 0; k < p.steps.size(); ++k) {
    const Step& s = p.steps[k];
    bool uses_gone = s.slot >= 0 && scalar_gone.at(static_cast<size_t>(s.slot));
    for (const Ref& r : s.args)
      if (!r.input && value_gone.at(static_cast<size_t>(r.index))) uses_gone = true;
    if (uses_gone) drop[k] = true;
    if (produces(s) == Produces::Value) value_gone.push_back(drop[k]);
    if (produces(s) == Produces::Scalar) scalar_gone.push_back(drop[k]);
  }
  std::vector<int> new_value(value_gone.size(), -1), new_scalar(scalar_gone.size(), -1);
  int v = 0, sc = 0;
  for (size_t i = 0; i < value_gone.size(); ++i)
    if (!value_gone[i]) new_value[i] = v++;
  for (size_t i = 0; i < scalar_gone.size(); ++i)
    if (!scalar_gone[i]) new_scalar[i] = sc++;
  Program out = p;
  out.steps.clear();
  for (size_t k = 0; k < p.steps.size(); ++k) {
    if (drop[k]) continue;
    Step s = p.steps[k];
    for (Ref& r : s.args) renumber(r, new_value);
    if (s.slot >= 0) s.slot = new_scalar.at(static_cast<size_t>(s.slot));
    out.steps.push_back(s);
  }
  return out;
}

Program remove_unused_inputs(const Program& p) {
  std::vector<bool> used(p.inputs.size(), false);
  for (const Step& s : p.steps)
    for (const Ref& r : s.args)
      if (r.input) used.at(static_cast<size_t>(r.index)) = true;
  std::vector<int> new_index(p.inputs.size(), -1);
  Program out = p;
  out.inputs.clear();
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (!used[i]) continue;
    new_index[i] = static_cast<int>(out.inputs.size());
    out.inputs.push_back(p.inputs[i]);
  }
  for (Step& s : out.steps)
    for (Ref& r : s.args)
      if (r.input) r.index = new_index[static_cast<size_t>(r.index)];
  return out;
}

Program shrink(const Program& failing, const std::function<bool(const Program&)>& fails,
               const ShrinkBudget& budget, ShrinkStats* stats) {
  Shrinker sh(fails, budget);
  Program p = failing;
  for (bool progress = true; progress && !sh.out_of_budget();) {
    progress = drop_step_chunks(sh, p);
    const Program fewer_inputs = remove_unused_inputs(p);
    if (fewer_inputs.inputs.size() < p.inputs.size()) progress |= sh.attempt(p, fewer_inputs);
    progress |= shorten_schedule(sh, p);
    progress |= simplify_frame(sh, p);
    progress |= shrink_shapes(sh, p);
  }
  if (stats) *stats = sh.stats;
  return p;
}

}  // namespace kfuzz
