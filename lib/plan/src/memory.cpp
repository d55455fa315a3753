#include "pipebench/plan/memory.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "pipebench/core/units.hpp"

namespace pipebench {

std::string_view to_string(MemCategory c) {
  switch (c) {
    case MemCategory::params: return "params";
    case MemCategory::grads: return "grads";
    case MemCategory::optimizer: return "optimizer";
    case MemCategory::activations: return "activations";
    case MemCategory::workspace: return "workspace";
    case MemCategory::comm: return "comm";
  }
  return "?";
}

void MemoryTracker::reserve(MemCategory cat, std::uint64_t bytes, std::string_view what) {
  if (!fits(bytes)) {
    std::string held;
    for (int i = 0; i < kNumMemCategories; ++i)
      held += fmt::format("{}{} {}", i ? ", " : "", to_string(static_cast<MemCategory>(i)),
                          format_bytes(static_cast<double>(current_[static_cast<std::size_t>(i)])));
    throw OutOfMemoryError(fmt::format(
        "rank {}: out of memory: tried to allocate {} ({} bytes) for {} [{}]; rank {} has a total capacity of {} "
        "({} bytes) of which {} is free; {} is allocated ({})",
        rank_, format_bytes(static_cast<double>(bytes)), bytes, what, to_string(cat), rank_,
        format_bytes(static_cast<double>(capacity_)), capacity_,
        format_bytes(static_cast<double>(capacity_ - std::min(total_, capacity_))),
        format_bytes(static_cast<double>(total_)), held));
  }
  const auto i = index(cat);
  current_[i] += bytes;
  peak_[i] = std::max(peak_[i], current_[i]);
  total_ += bytes;
  peak_total_ = std::max(peak_total_, total_);
}

void MemoryTracker::release(MemCategory cat, std::uint64_t bytes) {
  const auto i = index(cat);
  if (bytes > current_[i])
    throw std::logic_error(fmt::format("rank {}: releasing {} bytes of {} but only {} are held", rank_, bytes,
                                       to_string(cat), current_[i]));
  current_[i] -= bytes;
  total_ -= bytes;
}

void MemoryTracker::reset_peaks() {
  peak_ = current_;
  peak_total_ = total_;
}

}  // namespace pipebench
