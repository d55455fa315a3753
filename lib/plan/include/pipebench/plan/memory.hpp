// Per-rank memory tracker (SPEC §5). Every allocation a backend makes goes
// through it, in one of six categories; it keeps current and peak bytes per
// category and in total, and refuses any request that would exceed the
// capacity with an OutOfMemoryError whose message contains "out of memory"
// and the sizes (the signature the micro-batch probe looks for).
//
// The sim backend only accounts (nothing is allocated); real backends pair
// each successful reserve() with a release() of the same size.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "pipebench/core/error.hpp"

namespace pipebench {

enum class MemCategory : int { params = 0, grads, optimizer, activations, workspace, comm };
inline constexpr int kNumMemCategories = 6;
std::string_view to_string(MemCategory c);

class MemoryTracker {
 public:
  MemoryTracker(int rank, std::uint64_t capacity_bytes) : rank_(rank), capacity_(capacity_bytes) {}

  // Accounts `bytes` in `cat`, or throws OutOfMemoryError (nothing changes) if
  // the total would exceed the capacity. `what` names the buffer in the message.
  void reserve(MemCategory cat, std::uint64_t bytes, std::string_view what);
  // The same with `what` a callable that makes the name, called only for the
  // message: a reservation per action formats nothing when it fits.
  template <typename Name, typename = std::enable_if_t<std::is_invocable_r_v<std::string, Name&>>>
  void reserve(MemCategory cat, std::uint64_t bytes, Name&& what) {
    if (fits(bytes)) reserve(cat, bytes, std::string_view{});
    else reserve(cat, bytes, std::string_view{what()});
  }
  // Whether `bytes` more stay within the capacity.
  bool fits(std::uint64_t bytes) const { return total_ <= capacity_ && bytes <= capacity_ - total_; }
  // Returns bytes to the pool; releasing more than is held is a logic error.
  void release(MemCategory cat, std::uint64_t bytes);
  // Forgets the peaks (current stays): peaks then cover what follows.
  void reset_peaks();

  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t current(MemCategory c) const { return current_[index(c)]; }
  std::uint64_t peak(MemCategory c) const { return peak_[index(c)]; }
  std::uint64_t current_total() const { return total_; }
  std::uint64_t peak_total() const { return peak_total_; }

 private:
  static std::size_t index(MemCategory c) { return static_cast<std::size_t>(c); }
  int rank_;
  std::uint64_t capacity_;
  std::array<std::uint64_t, kNumMemCategories> current_{}, peak_{};
  std::uint64_t total_ = 0, peak_total_ = 0;
};

// An array whose bytes are reserved in a MemoryTracker for its lifetime
// (reserved before allocating, so an over-capacity request allocates
// nothing). Zero-initialised. Move-only.
template <typename T>
class TrackedArray {
 public:
  TrackedArray() = default;
  TrackedArray(MemoryTracker& tracker, MemCategory cat, std::size_t n, std::string_view what)
      : tracker_(&tracker), cat_(cat), n_(n) {
    tracker.reserve(cat, bytes(), what);
    data_.reset(new T[n]());
  }
  TrackedArray(TrackedArray&& o) noexcept { *this = std::move(o); }
  TrackedArray& operator=(TrackedArray&& o) noexcept {
    reset();
    tracker_ = std::exchange(o.tracker_, nullptr);
    cat_ = o.cat_;
    n_ = std::exchange(o.n_, 0);
    data_ = std::move(o.data_);
    return *this;
  }
  ~TrackedArray() { reset(); }

  void reset() {
    if (tracker_ && n_) tracker_->release(cat_, bytes());
    data_.reset();
    tracker_ = nullptr;
    n_ = 0;
  }
  T* data() const { return data_.get(); }
  std::size_t size() const { return n_; }
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(n_) * sizeof(T); }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  MemoryTracker* tracker_ = nullptr;
  MemCategory cat_ = MemCategory::workspace;
  std::size_t n_ = 0;
  std::unique_ptr<T[]> data_;
};

}  // namespace pipebench
