// The sandbox limits of the Jinja interpreter. A chat template comes from a downloaded model file, so it is
// untrusted input: parsing bounds nesting, and every render runs against a budget of steps, call depth and
// bytes built, each an error naming the limit (the server answers that request and serves the next).
// Generous for real templates: the shipped ones use under 1% of each (tests/test_jinja_limits.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cachet/status.h"

namespace cachet::jinja {

struct Limits {
  static constexpr int kMaxParseNesting = 128;       // blocks inside blocks, parentheses, unary operators
  static constexpr int kMaxExprDepth = 256;          // depth of one expression's tree (operator/filter chains)
  static constexpr int kMaxRenderDepth = 1024;       // statements + expressions being evaluated, nested
  static constexpr int kMaxCallDepth = 64;           // macro calls inside macro calls
  static constexpr int64_t kMaxSteps = 1'000'000;    // statements + expressions evaluated per render
  static constexpr size_t kMaxValueBytes = size_t{32} << 20;   // any one string (or list, 64 B per item) built
  static constexpr size_t kMaxTotalBytes = size_t{256} << 20;  // everything built by one render, summed
  static constexpr size_t kMaxOutputBytes = size_t{32} << 20;  // the rendered text
  static constexpr int kMaxValueNesting = 256;       // lists / dicts inside each other, when printed or compared
  static constexpr int64_t kMaxRange = 100'000;      // items of one range() (jinja2's sandbox: MAX_RANGE)
};

// One render's account. While a render runs, its budget is the thread's current one: values built anywhere
// in the interpreter (operators, filters, methods, globals) are charged to it.
class RenderBudget {
 public:
  RenderBudget();
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  // The budget of the render running on this thread, or null.
  static RenderBudget* current();

  // Before building a value of `bytes`: an error if it alone or the render's total would pass its limit.
  Status reserve(size_t bytes);
  // A value was built (Value's constructors call this): over the total, the render fails at its next step.
  void built(size_t bytes) { total_ += bytes; }
  // One statement or expression evaluated: the step budget, and an error recorded by fail() since.
  Status step();
  // The same checks without counting a step (after work that could not return an error, and at the end).
  Status check() const;
  // Work done where no error can be returned (printing, comparing): counted as steps; past the budget the
  // render fails at its next step and exhausted() tells the work to stop early.
  void work(int64_t n = 1) { steps_ += n; }
  bool exhausted() const { return !error_.is_ok() || steps_ > Limits::kMaxSteps || total_ > Limits::kMaxTotalBytes; }
  // Records an error for the next step() (the first one wins).
  void fail(Status s) {
    if (error_.is_ok()) error_ = std::move(s);
  }

  int64_t steps() const { return steps_; }
  size_t bytes_built() const { return total_; }

  int depth = 0;       // render nesting, kept by the renderer
  int call_depth = 0;  // macro calls, kept by the renderer

 private:
  RenderBudget* outer_;
  int64_t steps_ = 0;
  size_t total_ = 0;
  Status error_;
};

// What one render cost, counted (Template::render reports it): steps and work units, and bytes of values built.
struct RenderStats {
  int64_t steps = 0;
  size_t bytes_built = 0;
};

// Checks an allocation that no render is charged for (outside renders: nothing) against the current budget.
Status reserve_bytes(size_t bytes);
// Records a built value with the current budget, if any.
void charge_built(size_t bytes);
// Counts work with the current budget, if any; true when the render is over budget and the work should stop.
bool charge_work(int64_t n = 1);
// Records an error with the current budget, if any.
void fail_render(Status s);

}  // namespace cachet::jinja
