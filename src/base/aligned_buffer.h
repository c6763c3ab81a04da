// Owning, 64-byte aligned, uninitialized-by-default storage for activations and caches. Buffers of 2 MiB and
// more (repacked weights, KV pools) are 2 MiB aligned and asked for transparent huge pages: a decode step
// streams every weight once, and with 4 KiB pages that is a TLB miss every 4 KiB.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "base/check.h"

namespace cachet {

template <typename T>
class AlignedBuffer {
 public:
  static constexpr size_t kAlign = 64;
  static constexpr size_t kHugePage = size_t{2} << 20;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }
  AlignedBuffer(AlignedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(p_); }

  // Discards contents when the size changes.
  void resize(size_t n) {
    if (n == n_) return;
    std::free(p_);
    p_ = nullptr;
    n_ = n;
    if (n == 0) return;
    const size_t align = n * sizeof(T) >= kHugePage ? kHugePage : kAlign;
    size_t bytes = (n * sizeof(T) + align - 1) / align * align;
    p_ = static_cast<T*>(std::aligned_alloc(align, bytes));
    if (!p_) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == kHugePage) (void)madvise(p_, bytes, MADV_HUGEPAGE);  // a hint: failure changes nothing
#endif
  }
  void zero() {
    if (n_) std::memset(static_cast<void*>(p_), 0, n_ * sizeof(T));
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace cachet
