// A fixed-size array for tables of many megabytes (the planner's at p = 1024:
// simulator end times, validator counts). From 2 MiB on it is allocated on
// 2 MiB boundaries and the kernel is advised to back it with transparent huge
// pages where it offers them (THP "madvise" or "always"), so that filling it
// takes a page fault per 2 MiB instead of per 4 KiB: on a virtual machine,
// where a fault costs microseconds, most of such a table's cost otherwise.
// Elsewhere (no THP) it is an ordinary allocation.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <type_traits>

namespace pipebench {

// `bytes` of storage as described above; std::bad_alloc when there is none.
// Release with std::free.
void* allocate_large(std::size_t bytes);

template <typename T>
class LargeArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  LargeArray(std::size_t n, const T& value) : data_(static_cast<T*>(allocate_large(n * sizeof(T)))), size_(n) {
    for (std::size_t i = 0; i < n; ++i) data_[i] = value;
  }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  std::size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T[], Free> data_;
  std::size_t size_;
};

}  // namespace pipebench
