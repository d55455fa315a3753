#include "pipebench/parallel/grad_buckets.hpp"

#include <algorithm>

namespace pipebench::parallel {

std::uint64_t default_grad_bucket_bytes(int data_parallel, int grad_bytes) {
  const std::uint64_t params = std::max<std::uint64_t>(40'000'000, 1'000'000ull * static_cast<std::uint64_t>(std::max(1, data_parallel)));
  return params * static_cast<std::uint64_t>(std::max(1, grad_bytes));
}

std::vector<GradBucket> grad_buckets(const std::vector<GradLayer>& layers, std::uint64_t bucket_bytes, int grad_bytes,
                                     double lead) {
  double total = lead;
  for (const GradLayer& l : layers) total += l.cost;
  std::vector<GradBucket> out;
  GradBucket open;
  double done = lead;
  const auto per = static_cast<std::uint64_t>(std::max(1, grad_bytes));
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (open.params == 0) open.first = static_cast<int>(i);
    open.params += layers[i].params;
    done += layers[i].cost;
    const bool last = i + 1 == layers.size();
    if (open.params > 0 && (static_cast<std::uint64_t>(open.params) * per >= bucket_bytes || last)) {
      open.last = static_cast<int>(i);
      open.bytes = static_cast<std::uint64_t>(open.params) * per;
      open.ready = last || total <= 0.0 ? 1.0 : std::min(1.0, done / total);
      out.push_back(open);
      open = GradBucket{};
    }
  }
  return out;
}

std::vector<ParamGather> param_gathers(const std::vector<GradBucket>& buckets, const std::vector<double>& forward_costs) {
  const auto n = static_cast<int>(forward_costs.size());
  double total = 0.0;
  for (double c : forward_costs) total += c;
  std::vector<ParamGather> out;
  for (std::size_t k = buckets.size(); k-- > 0;) {
    // The bucket's earliest layer in the forward: its last in backward order.
    const int first_forward = n - 1 - buckets[k].last;
    double before = 0.0;
    for (int l = 0; l < first_forward; ++l) before += forward_costs[static_cast<std::size_t>(l)];
    out.push_back({static_cast<int>(k), total > 0.0 ? before / total : 0.0});
  }
  return out;
}

double prefetched_gather_wait(const std::vector<double>& compute_s, const std::vector<double>& gather_s) {
  double computed = 0.0;  // when the previous layer's compute ended
  double link = 0.0;      // when the previous gather ended
  double issue = 0.0;     // when the next gather may be issued
  double work = 0.0;
  for (std::size_t l = 0; l < compute_s.size(); ++l) {
    link = std::max(link, issue) + (l < gather_s.size() ? gather_s[l] : 0.0);
    const double start = std::max(computed, link);
    issue = start;  // the next layer's gather, one ahead
    computed = start + compute_s[l];
    work += compute_s[l];
  }
  return std::max(0.0, computed - work);
}

}  // namespace pipebench::parallel
