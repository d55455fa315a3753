// Context parallelism on the cpu backend (docs/context-parallel.md, "cpu
// backend"): which rows of each sequence this rank holds, and the
// attention of its queries against every rank's K/V — all-gathered into
// sequence order, the flash blocks at the rows' positions; in the backward
// the K/V gathered again and their gradients reduce-scattered to the ranks
// that hold them.
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "pipebench/backends/backend_cpu.hpp"
#include "pipebench/backends/cpu_flash_attention.hpp"
#include "pipebench/core/error.hpp"

namespace pipebench {

int CpuBackend::cp_position(int r, int j) const {
  const int L = seq_local_ / 2;
  return j < L ? r * L + j : (2 * cp_ - 1 - r) * L + (j - L);
}

void CpuBackend::setup_context(const StageSpec& spec) {
  cp_ = spec.context;
  cp_rank_ = spec.context_rank;
  seq_local_ = job_.model.seq_len / cp_;
  positions_.resize(static_cast<std::size_t>(seq_local_));
  for (int j = 0; j < seq_local_; ++j) positions_[static_cast<std::size_t>(j)] = cp_ == 1 ? j : cp_position(cp_rank_, j);
  if (cp_ == 1) return;
  if (!flash()) throw Error("cpu backend: context parallelism needs model.attention = \"flash\"");
  if (!context_ || context_->size() != cp_ || context_->rank() != cp_rank_)
    throw Error(fmt::format("cpu backend: context_parallel = {} needs its context group (set_context_group) before build",
                            cp_));
}

void CpuBackend::select_rows(const std::vector<std::int32_t>& whole, std::int32_t* mine) const {
  const std::size_t s = static_cast<std::size_t>(job_.model.seq_len), n = positions_.size();
  for (std::size_t bb = 0; bb < static_cast<std::size_t>(spec_.micro_batch_size); ++bb)
    for (std::size_t j = 0; j < n; ++j) mine[bb * n + j] = whole[bb * s + static_cast<std::size_t>(positions_[j])];
}

void CpuBackend::gather_sequence_kv(const float* qkv, int kv_heads) {
  const std::int64_t w = cp_kv_width(kv_heads), ld = ht_ + w, T = tokens_, s = job_.model.seq_len;
  float* packed = cp_packed();
  for (std::int64_t r = 0; r < T; ++r) std::memcpy(packed + r * w, qkv + r * ld + ht_, sizeof(float) * static_cast<std::size_t>(w));
  float* gathered = cp_gathered(kv_heads);
  context_->all_gather(packed, gathered, T * w);
  float* seq = cp_seq(kv_heads);
  for (int r = 0; r < cp_; ++r)
    for (std::int64_t bb = 0; bb < spec_.micro_batch_size; ++bb)
      for (int j = 0; j < seq_local_; ++j)
        std::memcpy(seq + (bb * s + cp_position(r, j)) * w, gathered + ((r * spec_.micro_batch_size + bb) * seq_local_ + j) * w,
                    sizeof(float) * static_cast<std::size_t>(w));
}

void CpuBackend::context_attention_forward(const float* qkv, float* attn, float* lse, int kv_heads) {
  gather_sequence_kv(qkv, kv_heads);
  const int heads = at_, C = static_cast<int>(ht_), d = C / heads, group = heads / kv_heads;
  const std::int64_t w = cp_kv_width(kv_heads), ld = C + w, s = job_.model.seq_len;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* seq = cp_seq(kv_heads);
  for (std::int64_t bb = 0; bb < spec_.micro_batch_size; ++bb)
    for (int hd = 0; hd < heads; ++hd) {
      const float* k = seq + bb * s * w + static_cast<std::int64_t>(hd / group) * d;
      const cpu::KeyRows keys{k, k + w / 2, static_cast<int>(w), static_cast<int>(s), 0};
      for_each_run([&](std::int64_t row0, int, int len, int pos0) {
        if (row0 / seq_local_ != bb) return;
        const cpu::QueryRows q{qkv + row0 * ld + static_cast<std::int64_t>(hd) * d, static_cast<int>(ld), len, pos0};
        cpu::flash_forward_block(q, keys, d, scale, attn + row0 * C + static_cast<std::int64_t>(hd) * d, C,
                                 lse + (bb * heads + hd) * seq_local_ + (row0 - bb * seq_local_), flash_tiles_.data());
      });
    }
}

void CpuBackend::context_attention_backward(const float* qkv, const float* attn, const float* lse, const float* d_attn,
                                            float* d_qkv, int kv_heads) {
  gather_sequence_kv(qkv, kv_heads);  // not kept from the forward: gathered again
  const int heads = at_, C = static_cast<int>(ht_), d = C / heads, group = heads / kv_heads;
  const std::int64_t w = cp_kv_width(kv_heads), ld = C + w, s = job_.model.seq_len, T = tokens_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* seq = cp_seq(kv_heads);
  float* dseq = cp_dseq(kv_heads);
  std::memset(dseq, 0, sizeof(float) * static_cast<std::size_t>(cp_ * T * w));
  std::memset(d_qkv, 0, sizeof(float) * static_cast<std::size_t>(T * ld));
  for (std::int64_t bb = 0; bb < spec_.micro_batch_size; ++bb)
    for (int hd = 0; hd < heads; ++hd) {
      const std::int64_t kv_col = bb * s * w + static_cast<std::int64_t>(hd / group) * d;
      const cpu::KeyRows keys{seq + kv_col, seq + kv_col + w / 2, static_cast<int>(w), static_cast<int>(s), 0};
      for_each_run([&](std::int64_t row0, int, int len, int pos0) {
        if (row0 / seq_local_ != bb) return;
        const std::int64_t col = static_cast<std::int64_t>(hd) * d;
        const cpu::QueryRows q{qkv + row0 * ld + col, static_cast<int>(ld), len, pos0};
        cpu::flash_backward_block(q, keys, d, scale, attn + row0 * C + col, d_attn + row0 * C + col, C,
                                  lse + (bb * heads + hd) * seq_local_ + (row0 - bb * seq_local_), d_qkv + row0 * ld + col,
                                  static_cast<int>(ld), dseq + kv_col, dseq + kv_col + w / 2, static_cast<int>(w),
                                  flash_tiles_.data());
      });
    }
  // The K/V gradients back in rank-major order, summed over the group onto the ranks that hold those rows.
  float* gathered = cp_gathered(kv_heads);
  for (int r = 0; r < cp_; ++r)
    for (std::int64_t bb = 0; bb < spec_.micro_batch_size; ++bb)
      for (int j = 0; j < seq_local_; ++j)
        std::memcpy(gathered + ((r * spec_.micro_batch_size + bb) * seq_local_ + j) * w, dseq + (bb * s + cp_position(r, j)) * w,
                    sizeof(float) * static_cast<std::size_t>(w));
  float* packed = cp_packed();
  context_->reduce_scatter(gathered, packed, T * w);
  for (std::int64_t r = 0; r < T; ++r)
    std::memcpy(d_qkv + r * ld + C, packed + r * w, sizeof(float) * static_cast<std::size_t>(w));
}

}  // namespace pipebench
