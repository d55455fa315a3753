// Device memory of the cuda backend, every byte through the memory tracker:
// DeviceBuffer (one allocation for the backend's lifetime), HostBuffer
// (pinned staging, untracked) and SlotPool (per-micro-batch blocks). Internal
// to lib/backends/src/cuda.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "pipebench/backends/cuda_check.hpp"
#include "pipebench/plan/memory.hpp"

namespace pipebench::gpu {

inline constexpr const char* kWho = "cuda backend";

// cudaMalloc of `bytes` already reserved in `tracker`. When the device is
// fuller than the tracker knows and the allocation fails, the reservation is
// given back and the failure is an OutOfMemoryError with the tracker's
// signature ("out of memory"), so runs and the probe treat both alike.
void* cuda_malloc_or_oom(MemoryTracker& tracker, MemCategory cat, std::uint64_t bytes, std::string_view what);

// A device allocation reserved in the tracker for its lifetime (reserved
// first: an over-capacity request allocates nothing). Zeroed unless asked not to.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(MemoryTracker& tracker, MemCategory cat, std::uint64_t bytes, std::string_view what, bool zero = true)
      : cat_(cat) {
    if (bytes == 0) return;
    tracker.reserve(cat, bytes, what);
    ptr_ = cuda_malloc_or_oom(tracker, cat, bytes, what);
    tracker_ = &tracker;
    bytes_ = bytes;
    // The buffer owns the allocation and the reservation from here: a failed
    // zeroing frees both before it throws (a destructor never runs for an
    // object whose constructor threw; issue 72).
    if (zero)
      if (const cudaError_t rc = cudaMemset(ptr_, 0, bytes); rc != cudaSuccess) {
        reset();
        cuda_check(rc, kWho, "cudaMemset");
      }
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    reset();
    tracker_ = std::exchange(o.tracker_, nullptr);
    cat_ = o.cat_;
    bytes_ = std::exchange(o.bytes_, 0);
    ptr_ = std::exchange(o.ptr_, nullptr);
    return *this;
  }
  ~DeviceBuffer() { reset(); }
  void reset() {
    if (ptr_) cudaFree(ptr_);
    if (tracker_ && bytes_) tracker_->release(cat_, bytes_);
    ptr_ = nullptr;
    tracker_ = nullptr;
    bytes_ = 0;
  }
  std::byte* data() const { return static_cast<std::byte*>(ptr_); }
  std::uint64_t bytes() const { return bytes_; }

 private:
  MemoryTracker* tracker_ = nullptr;
  MemCategory cat_ = MemCategory::workspace;
  std::uint64_t bytes_ = 0;
  void* ptr_ = nullptr;
};

// Pinned host memory (the MPI transport's staging copies); not tracked.
class HostBuffer {
 public:
  explicit HostBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes) cuda_check(cudaMallocHost(&ptr_, bytes), kWho, "cudaMallocHost (staging buffer)");
  }
  HostBuffer(HostBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  HostBuffer& operator=(HostBuffer&&) = delete;
  ~HostBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Per-micro-batch device blocks of one size — activation slabs, a split
// backward's stashes, recomputation's kept inputs — each counted in the
// tracker (activations) from acquire(mb) to release(mb). Released memory
// waits in a free list for the next micro-batch, never returned until the
// end (PyTorch's caching allocator does the same): the process holds the
// schedule's peak. Every use is on the backend's one stream, so a block
// released on the host is reused only by work queued after its last reader.
class SlotPool {
 public:
  SlotPool() = default;
  SlotPool(MemoryTracker& tracker, std::uint64_t bytes, int slots, const char* what)
      : tracker_(&tracker), bytes_(bytes), what_(what), held_(static_cast<std::size_t>(slots), nullptr) {}
  SlotPool(SlotPool&& o) noexcept { *this = std::move(o); }
  SlotPool& operator=(SlotPool&& o) noexcept {
    free_all();
    tracker_ = std::exchange(o.tracker_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    what_ = o.what_;
    held_ = std::move(o.held_);
    free_ = std::move(o.free_);
    o.held_.clear();
    o.free_.clear();
    return *this;
  }
  ~SlotPool() { free_all(); }

  std::uint64_t bytes() const { return bytes_; }
  // The block of micro-batch mb, or null when it holds none.
  std::byte* get(int mb) const { return held_.at(static_cast<std::size_t>(mb)); }
  // A block for mb (one it still held is released first: a forward again
  // without its backward). OutOfMemoryError beyond the tracker's capacity.
  std::byte* acquire(int mb) {
    std::byte*& slot = held_.at(static_cast<std::size_t>(mb));
    if (slot) release(mb);
    const auto name = [&] { return fmt::format(fmt::runtime(what_), mb); };
    tracker_->reserve(MemCategory::activations, bytes_, name);
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = static_cast<std::byte*>(cuda_malloc_or_oom(*tracker_, MemCategory::activations, bytes_, name()));
    }
    return slot;
  }
  // Returns whether mb held a block.
  bool release(int mb) {
    std::byte*& slot = held_.at(static_cast<std::size_t>(mb));
    if (!slot) return false;
    tracker_->release(MemCategory::activations, bytes_);
    free_.push_back(std::exchange(slot, nullptr));
    return true;
  }

 private:
  void free_all() {
    for (std::size_t mb = 0; mb < held_.size(); ++mb) release(static_cast<int>(mb));
    for (std::byte* block : free_) cudaFree(block);
    free_.clear();
  }
  MemoryTracker* tracker_ = nullptr;
  std::uint64_t bytes_ = 0;
  const char* what_ = "";  // a format with the micro-batch: "activations of micro-batch {}"
  std::vector<std::byte*> held_, free_;
};

}  // namespace pipebench::gpu
