#include "chat/jinja_limits.h"

namespace cachet::jinja {

namespace {

thread_local RenderBudget* t_current = nullptr;

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

RenderBudget::RenderBudget() : outer_(t_current) { t_current = this; }
RenderBudget::~RenderBudget() { t_current = outer_; }

RenderBudget* RenderBudget::current() { return t_current; }

Status RenderBudget::reserve(size_t bytes) {
  if (bytes > Limits::kMaxValueBytes)
    return resource_exhausted("chat template builds a value of " + std::to_string(bytes) + " bytes (limit " +
                              mib(Limits::kMaxValueBytes) + ")");
  if (total_ + bytes > Limits::kMaxTotalBytes)
    return resource_exhausted("chat template builds more than " + mib(Limits::kMaxTotalBytes) + " in one render");
  return Status::ok();
}

Status RenderBudget::step() {
  ++steps_;
  return check();
}

Status RenderBudget::check() const {
  if (!error_.is_ok()) return error_;
  if (steps_ > Limits::kMaxSteps)
    return resource_exhausted("chat template runs more than " + std::to_string(Limits::kMaxSteps) +
                              " steps in one render");
  if (total_ > Limits::kMaxTotalBytes)
    return resource_exhausted("chat template builds more than " + mib(Limits::kMaxTotalBytes) + " in one render");
  return Status::ok();
}

Status reserve_bytes(size_t bytes) {
  RenderBudget* b = RenderBudget::current();
  return b ? b->reserve(bytes) : Status::ok();
}

bool charge_work(int64_t n) {
  RenderBudget* b = RenderBudget::current();
  if (!b) return false;
  b->work(n);
  return b->exhausted();
}

void fail_render(Status s) {
  if (RenderBudget* b = RenderBudget::current()) b->fail(std::move(s));
}

void charge_built(size_t bytes) {
  if (RenderBudget* b = RenderBudget::current()) b->built(bytes);
}

}  // namespace cachet::jinja
