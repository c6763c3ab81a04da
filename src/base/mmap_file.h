// A read-only memory map of a whole file. Owning; move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cachet/status.h"

namespace cachet {

class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Tells the kernel the pages wholly inside [p, p + n) are not needed now: they leave this process's
  // resident set (the page cache keeps them; a later read faults them back in from it). Ranges outside the
  // mapping are ignored.
  void drop_pages(const uint8_t* p, size_t n) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace cachet
