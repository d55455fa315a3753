// The cpu backend's tensor-parallel plumbing (docs/tensor-parallel.md): the
// sums over the tensor group that the layers' partial results need, the
// sequence-parallel gathers and reduce-scatters, the vocabulary-parallel
// cross-entropy and the gradient norm over the group. With t = 1 every
// helper is the unsplit arithmetic (no collective, the same bits).
#include <cstring>
#include <utility>

#include "pipebench/backends/backend_cpu.hpp"
#include "pipebench/backends/cpu_kernels.hpp"

namespace pipebench {

void CpuBackend::residual_start(float* y, const float* x, std::int64_t n) const {
  if (lead()) std::memcpy(y, x, sizeof(float) * static_cast<std::size_t>(n));
  else std::memset(y, 0, sizeof(float) * static_cast<std::size_t>(n));
}

const float* CpuBackend::gathered(const float* part) {
  if (!sequence_parallel()) return part;
  tensor_->all_gather(part, sp_gathered(), ts_ * job_.model.hidden);
  return sp_gathered();
}

void CpuBackend::gather_into(const float* part, float* whole) {
  if (sequence_parallel()) tensor_->all_gather(part, whole, ts_ * job_.model.hidden);
  else std::memcpy(whole, part, sizeof(float) * static_cast<std::size_t>(ts_ * job_.model.hidden));
}

void CpuBackend::sum_over_group(float* whole, float* part) {
  if (sequence_parallel()) tensor_->reduce_scatter(whole, part, ts_ * job_.model.hidden);
  else tp_sum(whole, tokens_ * job_.model.hidden);
}

void CpuBackend::row_parallel_out(const float* in, const float* W, const float* b, const float* residual, float* y,
                                  int in_dim) {
  const int T = static_cast<int>(tokens_), h = job_.model.hidden;
  if (!sequence_parallel()) {  // the lead's partial carries the bias and the residual
    residual_start(y, residual, tokens_ * h);
    cpu::linear_forward(in, W, lead() ? b : nullptr, y, T, in_dim, h, true);
    tp_sum(y, tokens_ * h);
    return;
  }
  // Each rank adds them to its own tokens after the reduce-scatter.
  cpu::linear_forward(in, W, nullptr, sp_partial(), T, in_dim, h);
  tensor_->reduce_scatter(sp_partial(), y, ts_ * h);
  for (std::int64_t r = 0; r < ts_; ++r) {
    float* row = y + r * h;
    const float* res = residual + r * h;
    for (int c = 0; c < h; ++c) row[c] += res[c] + (b ? b[c] : 0.0f);
  }
}

void CpuBackend::column_input_grad(const float* W, const float* d, float* dst, int out_dim, const float* residual) {
  const int T = static_cast<int>(tokens_), h = job_.model.hidden;
  if (!sequence_parallel()) {
    if (residual) residual_start(dst, residual, tokens_ * h);
    cpu::linear_backward_input(W, d, dst, T, h, out_dim, residual != nullptr);
    tp_sum(dst, tokens_ * h);
    return;
  }
  cpu::linear_backward_input(W, d, sp_partial(), T, h, out_dim);
  tensor_->reduce_scatter(sp_partial(), dst, ts_ * h);
  if (residual)
    for (std::int64_t i = 0; i < ts_ * h; ++i) dst[i] += residual[i];
}

void CpuBackend::backward_done(Chunk& c) {
  if (!sequence_parallel() || ++c.backwards_done < spec_.num_microbatches) return;
  if (std::exchange(c.partials_summed, false)) return;  // piece by piece already (piece_final)
  for (const Piece& p : c.pieces) sum_sequence_partials(c, p);
}

void CpuBackend::sum_sequence_partials(Chunk& c, const Piece& p) {
  for (const TensorSlot& t : p.tensors)
    if (t.sequence_partial) tensor_->sum(c.grads.data() + t.offset, t.size);
}

void CpuBackend::piece_final(int chunk, Chunk& c, const Piece& p, int done) {
  if (!hook_ || chunk != hook_chunk_) return;
  if (sequence_parallel()) {
    sum_sequence_partials(c, p);
    c.partials_summed = true;
  }
  hook_(done);
}

double CpuBackend::vocab_parallel_loss(float* logits, const std::int32_t* targets) {
  const int T = static_cast<int>(tokens_), V = static_cast<int>(vocab_local_);
  float* row_max = tp_stats_.data();
  float* sum_target = row_max + T;
  cpu::vocab_parallel_row_max(logits, row_max, T, V, vocab_valid_);
  tensor_->max(row_max, T);
  cpu::vocab_parallel_exp(logits, row_max, targets, vocab_part_, sum_target, T, V, vocab_valid_);
  tensor_->sum(sum_target, 2 * static_cast<std::int64_t>(T));
  return cpu::vocab_parallel_finish(logits, sum_target, T, V);
}

// Tensor-parallel: each piece's sum over the group, a tensor every rank
// holds whole (`shared`) counted on the lead rank only.
void CpuBackend::grad_sq_norm_by_piece(std::vector<double>& per_piece) const {
  std::vector<double> mine(per_piece.size(), 0.0);
  for (const Chunk& c : chunks_)
    for (const Piece& p : c.pieces) {
      double sum = 0.0;
      for (const TensorSlot& t : p.tensors) {
        const parallel::Span part = owned_part(c, t);
        if (part.size() > 0 && (!t.shared || lead())) sum += cpu::sum_squares(owned_grads(c, part), part.size());
      }
      mine.at(static_cast<std::size_t>(p.id)) += sum;
    }
  if (tp_ > 1) tensor_->sum(mine.data(), static_cast<std::int64_t>(mine.size()));
  for (std::size_t i = 0; i < mine.size(); ++i) per_piece[i] += mine[i];
}

}  // namespace pipebench
