// The optimizer's shards under ZeRO-1 (Megatron-LM's distributed optimizer;
// docs/parallel.md): a rank's parameters, its chunks' flat buffers one after
// another (n elements), cut into d equal shards of S = ceil(n / d), replica
// q owning [q·S, min((q+1)·S, n)) — the last one short, its optimizer state
// padded to S as the planner counts it (optimizer_shard_params, model.hpp).
// A chunk's part of a shard is the intersection with the chunk's range.
#pragma once

#include <algorithm>
#include <cstdint>

namespace pipebench::parallel {

struct Span {
  std::int64_t begin = 0, end = 0;  // [begin, end)
  std::int64_t size() const { return end > begin ? end - begin : 0; }
};

inline Span intersect(Span a, Span b) { return {std::max(a.begin, b.begin), std::min(a.end, b.end)}; }

// The elements each shard holds (the last shard's padding included).
inline std::int64_t shard_size(std::int64_t n, int d) { return (n + d - 1) / d; }

// Replica q's shard of n elements.
inline Span shard_of(std::int64_t n, int d, int q) {
  const std::int64_t s = shard_size(n, d);
  return {std::min(n, q * s), std::min(n, (q + 1) * s)};
}

}  // namespace pipebench::parallel
