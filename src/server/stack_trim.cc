#include "server/stack_trim.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace cachet {

namespace {
constexpr uintptr_t kKeep = 64 << 10;  // below the current frame: whatever the caller's callees touch next

struct StackBounds {
  uintptr_t low = 0;  // lowest usable address; 0: unknown
};

StackBounds read_bounds() {
  StackBounds b;
  pthread_attr_t a;
  if (pthread_getattr_np(pthread_self(), &a) != 0) return b;
  void* addr = nullptr;
  size_t size = 0;
  if (pthread_attr_getstack(&a, &addr, &size) == 0) b.low = reinterpret_cast<uintptr_t>(addr);
  pthread_attr_destroy(&a);
  return b;
}
}  // namespace

void release_unused_stack() {
  thread_local const StackBounds bounds = read_bounds();
  if (bounds.low == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  volatile char probe = 0;
  const uintptr_t sp = reinterpret_cast<uintptr_t>(&probe);
  const uintptr_t lo = (bounds.low + page - 1) & ~(page - 1);
  if (sp < lo + kKeep + page) return;
  const uintptr_t hi = (sp - kKeep) & ~(page - 1);
  madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace cachet
