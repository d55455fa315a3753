// Context parallelism on the cpu backend (docs/context-parallel.md, "cpu
// backend"): which rows of each sequence this rank holds, and the
// attention of its queries against every rank's K/V — all-gathered into
// sequence order, the flash blocks at the rows' positions; in the backward
// the K/V gathered again and their gradients reduce-scattered to the ranks
// that hold them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

void CpuBackend::pack_kv(const float* qkv, int kv_heads, float* out) const {
  const std::int64_t w = cp_kv_width(kv_heads), ld = ht_ + w;
  for (std::int64_t r = 0; r < tokens_; ++r) std::memcpy(out + r * w, qkv + r * ld + ht_, sizeof(float) * static_cast<std::size_t>(w));
}

void CpuBackend::reorder_rows(float* ranks, float* seq, int kv_heads, bool to_sequence) const {
  const std::int64_t w = cp_kv_width(kv_heads), s = job_.model.seq_len, b = spec_.micro_batch_size;
  const auto bytes = sizeof(float) * static_cast<std::size_t>(w);
  for (int r = 0; r < cp_; ++r)
    for (std::int64_t bb = 0; bb < b; ++bb)
      for (int j = 0; j < seq_local_; ++j) {
        float* in_seq = seq + (bb * s + cp_position(r, j)) * w;
        float* in_ranks = ranks + ((r * b + bb) * seq_local_ + j) * w;
        if (to_sequence) std::memcpy(in_seq, in_ranks, bytes);
        else std::memcpy(in_ranks, in_seq, bytes);
      }
}

void CpuBackend::gather_sequence_kv(const float* qkv, int kv_heads) {
  float* packed = cp_packed();
  pack_kv(qkv, kv_heads, packed);
  context_->all_gather(packed, cp_gathered(kv_heads), tokens_ * cp_kv_width(kv_heads));
  reorder_rows(cp_gathered(kv_heads), cp_seq(kv_heads), kv_heads, true);
}

void CpuBackend::context_attention_forward(const float* qkv, float* attn, float* lse, int kv_heads) {
  gather_sequence_kv(qkv, kv_heads);
  const int heads = at_, C = static_cast<int>(ht_), d = C / heads, group = heads / kv_heads;
  const std::int64_t w = cp_kv_width(kv_heads), ld = C + w, s = job_.model.seq_len;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* seq = cp_seq(kv_heads);
  // Each query chunk of each sequence (its rows row0.., positions pos0..) against its sequence's K/V, head by head.
  for_each_run([&](std::int64_t row0, int, int len, int pos0) {
    const std::int64_t bb = row0 / seq_local_;
    for (int hd = 0; hd < heads; ++hd) {
      const std::int64_t col = static_cast<std::int64_t>(hd) * d;
      const float* k = seq + bb * s * w + static_cast<std::int64_t>(hd / group) * d;
      cpu::flash_forward_block({qkv + row0 * ld + col, static_cast<int>(ld), len, pos0},
                               {k, k + w / 2, static_cast<int>(w), static_cast<int>(s), 0}, d, scale, attn + row0 * C + col,
                               C, lse + (bb * heads + hd) * seq_local_ + (row0 - bb * seq_local_), flash_tiles_.data());
    }
  });
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
  for_each_run([&](std::int64_t row0, int, int len, int pos0) {
    const std::int64_t bb = row0 / seq_local_;
    for (int hd = 0; hd < heads; ++hd) {
      const std::int64_t col = static_cast<std::int64_t>(hd) * d, kv_col = bb * s * w + static_cast<std::int64_t>(hd / group) * d;
      cpu::flash_backward_block({qkv + row0 * ld + col, static_cast<int>(ld), len, pos0},
                                {seq + kv_col, seq + kv_col + w / 2, static_cast<int>(w), static_cast<int>(s), 0}, d, scale,
                                attn + row0 * C + col, d_attn + row0 * C + col, C,
                                lse + (bb * heads + hd) * seq_local_ + (row0 - bb * seq_local_), d_qkv + row0 * ld + col,
                                static_cast<int>(ld), dseq + kv_col, dseq + kv_col + w / 2, static_cast<int>(w),
                                flash_tiles_.data());
    }
  });
  // The K/V gradients back in rank-major order, summed over the group onto the ranks that hold those rows.
  reorder_rows(cp_gathered(kv_heads), dseq, kv_heads, false);
  float* packed = cp_packed();
  context_->reduce_scatter(cp_gathered(kv_heads), packed, T * w);
  for (std::int64_t r = 0; r < T; ++r)
    std::memcpy(d_qkv + r * ld + C, packed + r * w, sizeof(float) * static_cast<std::size_t>(w));
}

namespace {

// Row by row, the partial attention `o` (rows x d, stride d) with its
// log-sum-exp `l` merged into the running `out` (stride ldo) and `lse`:
// out = out·e^(lse−L) + o·e^(l−L), L = log(e^lse + e^l); a row with no key
// (−inf) changes nothing.
void merge_partial(const float* o, const float* l, int rows, int d, float* out, int ldo, float* lse) {
  for (int i = 0; i < rows; ++i) {
    if (std::isinf(l[i])) continue;
    float* row = out + static_cast<std::int64_t>(i) * ldo;
    const float* part = o + static_cast<std::int64_t>(i) * d;
    if (std::isinf(lse[i])) {
      std::memcpy(row, part, sizeof(float) * static_cast<std::size_t>(d));
      lse[i] = l[i];
      continue;
    }
    const float m = std::max(lse[i], l[i]);
    const float L = m + std::log(std::exp(lse[i] - m) + std::exp(l[i] - m));
    const float a = std::exp(lse[i] - L), b = std::exp(l[i] - L);
    for (int c = 0; c < d; ++c) row[c] = a * row[c] + b * part[c];
    lse[i] = L;
  }
}

}  // namespace

void CpuBackend::ring_attention_forward(const float* qkv, float* attn, float* lse, int kv_heads) {
  const int heads = at_, C = static_cast<int>(ht_), d = C / heads, group = heads / kv_heads, L = seq_local_ / 2;
  const std::int64_t w = cp_kv_width(kv_heads), ld = C + w;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float *cur = ring_buffer(kv_heads, 0), *next = ring_buffer(kv_heads, 1);
  float* o = ring_buffer(kv_heads, kCpuRingBuffers);
  float* l = o + static_cast<std::int64_t>(L) * d;
  pack_kv(qkv, kv_heads, cur);
  std::fill(lse, lse + static_cast<std::int64_t>(spec_.micro_batch_size) * heads * seq_local_,
            -std::numeric_limits<float>::infinity());
  for (int step = 0; step < cp_; ++step) {
    const int r = (cp_rank_ - step + cp_) % cp_;  // whose K/V this rank holds now
    if (step + 1 < cp_) context_->ring_start(cur, next, tokens_ * w);
    for_each_visible_pair(r, [&](std::int64_t qrow, int qpos, std::int64_t krow, int kpos) {
      const std::int64_t bb = qrow / seq_local_;
      for (int hd = 0; hd < heads; ++hd) {
        const float* k = cur + krow * w + static_cast<std::int64_t>(hd / group) * d;
        const std::int64_t col = static_cast<std::int64_t>(hd) * d;
        cpu::flash_forward_block({qkv + qrow * ld + col, static_cast<int>(ld), L, qpos},
                                 {k, k + w / 2, static_cast<int>(w), L, kpos}, d, scale, o, d, l, flash_tiles_.data());
        merge_partial(o, l, L, d, attn + qrow * C + col, C, lse + (bb * heads + hd) * seq_local_ + (qrow - bb * seq_local_));
      }
    });
    if (step + 1 < cp_) {
      context_->ring_wait();
      std::swap(cur, next);
    }
  }
}

void CpuBackend::ring_attention_backward(const float* qkv, const float* attn, const float* lse, const float* d_attn,
                                         float* d_qkv, int kv_heads) {
  const int heads = at_, C = static_cast<int>(ht_), d = C / heads, group = heads / kv_heads, L = seq_local_ / 2;
  const std::int64_t w = cp_kv_width(kv_heads), ld = C + w, T = tokens_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float *cur = ring_buffer(kv_heads, 0), *next = ring_buffer(kv_heads, 1);
  float *dcur = ring_buffer(kv_heads, 2), *dnext = ring_buffer(kv_heads, 3);
  pack_kv(qkv, kv_heads, cur);
  std::memset(dcur, 0, sizeof(float) * static_cast<std::size_t>(T * w));
  std::memset(d_qkv, 0, sizeof(float) * static_cast<std::size_t>(T * ld));
  for (int step = 0; step < cp_; ++step) {
    const int r = (cp_rank_ - step + cp_) % cp_;
    if (step + 1 < cp_) context_->ring_start(cur, next, T * w);
    for_each_visible_pair(r, [&](std::int64_t qrow, int qpos, std::int64_t krow, int kpos) {
      const std::int64_t bb = qrow / seq_local_;
      for (int hd = 0; hd < heads; ++hd) {
        const std::int64_t col = static_cast<std::int64_t>(hd) * d, kv_col = krow * w + static_cast<std::int64_t>(hd / group) * d;
        cpu::flash_backward_block({qkv + qrow * ld + col, static_cast<int>(ld), L, qpos},
                                  {cur + kv_col, cur + kv_col + w / 2, static_cast<int>(w), L, kpos}, d, scale,
                                  attn + qrow * C + col, d_attn + qrow * C + col, C,
                                  lse + (bb * heads + hd) * seq_local_ + (qrow - bb * seq_local_), d_qkv + qrow * ld + col,
                                  static_cast<int>(ld), dcur + kv_col, dcur + kv_col + w / 2, static_cast<int>(w),
                                  flash_tiles_.data());
      }
    });
    if (step + 1 < cp_) {
      context_->ring_wait();
      std::swap(cur, next);
    }
    // The gradients of the K/V just used travel with them (after the last
    // step, home: rank r + 1's); this rank receives those of the K/V it holds next.
    context_->ring_start(dcur, dnext, T * w);
    context_->ring_wait();
    std::swap(dcur, dnext);
  }
  for (std::int64_t row = 0; row < T; ++row)
    std::memcpy(d_qkv + row * ld + C, dcur + row * w, sizeof(float) * static_cast<std::size_t>(w));
}

}  // namespace pipebench
