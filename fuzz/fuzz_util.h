// Shared by the libFuzzer targets: the input as a file (the loaders take paths), without touching the disk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace cachet::fuzz {

// An anonymous in-memory file holding `data`, reachable as /proc/self/fd/N while this object lives.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(memfd_create("fuzz", 0)) {
    size_t off = 0;
    while (fd_ >= 0 && off < size) {
      const ssize_t n = write(fd_, data + off, size - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  }
  ~MemFile() {
    if (fd_ >= 0) close(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace cachet::fuzz
