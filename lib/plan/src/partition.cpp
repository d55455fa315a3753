#include "pipebench/plan/partition.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace pipebench {

std::vector<int> split_even(int layers, int stages, Remainder where) {
  if (stages < 1 || layers < stages)
    throw std::invalid_argument(fmt::format("cannot split {} layers into {} non-empty stages", layers, stages));
  const int base = layers / stages, rem = layers % stages;
  std::vector<int> sizes(static_cast<std::size_t>(stages), base);
  if (where == Remainder::last) sizes.back() += rem;
  else sizes.front() += rem;
  return sizes;
}

std::vector<int> split_balanced(const std::vector<double>& layer_cost, int stages,
                                double first_extra, double last_extra) {
  const int L = static_cast<int>(layer_cost.size());
  if (stages < 1 || L < stages)
    throw std::invalid_argument(fmt::format("cannot split {} layers into {} non-empty stages", L, stages));
  std::vector<double> prefix(static_cast<std::size_t>(L) + 1, 0.0);
  for (int i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + layer_cost[i];
  auto cost = [&](int s, int from, int to) {  // layers [from, to) on stage s
    double c = prefix[to] - prefix[from];
    if (s == 0) c += first_extra;
    if (s == stages - 1) c += last_extra;
    return c;
  };
  // Dynamic programme over (stage s, first layer i of stage s) on the suffix
  // [i, L): value(s, i) combines the suffix's stage costs with `combine`.
  // Split points are scanned from the largest stage s down and replaced only
  // on strict improvement, so ties give earlier stages more layers. Stage s
  // can start only at layers s .. s + W - 1 (W = L - stages + 1: every stage
  // non-empty), so the tables hold that band alone: (stages + 1) x W, not
  // stages x L (1024 stages of 1024 layers: W = 1).
  constexpr double inf = std::numeric_limits<double>::infinity();
  const int W = L - stages + 1;
  auto at = [W](int s, int i) {  // (stage s, first layer i) in the band
    return static_cast<std::size_t>(s) * static_cast<std::size_t>(W) + static_cast<std::size_t>(i - s);
  };
  std::vector<double> value;
  auto solve = [&](auto combine, double cap, std::vector<int>& cut) {
    value.assign(static_cast<std::size_t>(stages + 1) * static_cast<std::size_t>(W), inf);
    cut.assign(static_cast<std::size_t>(stages) * static_cast<std::size_t>(W), -1);
    value[at(stages, L)] = 0.0;
    for (int s = stages - 1; s >= 0; --s) {
      for (int i = s; i < s + W; ++i) {
        double& best = value[at(s, i)];
        for (int j = s + W; j > i; --j) {
          const double rest = value[at(s + 1, j)];
          const double c = cost(s, i, j);
          if (c > cap || rest == inf) continue;
          const double v = combine(c, rest);
          if (v < best) {
            best = v;
            cut[at(s, i)] = j;
          }
        }
      }
    }
    return value[at(0, 0)];
  };
  std::vector<int> cut;
  // 1. the smallest achievable maximum stage cost;
  const double best_max = solve([](double c, double rest) { return std::max(c, rest); }, inf, cut);
  // 2. among splits within it, the most even one (least sum of squared costs).
  solve([](double c, double rest) { return c * c + rest; }, best_max * (1.0 + 1e-12), cut);
  std::vector<int> sizes;
  for (int s = 0, i = 0; s < stages; ++s) {
    const int j = cut[at(s, i)];
    sizes.push_back(j - i);
    i = j;
  }
  return sizes;
}

Partition partition_from_sizes(const std::vector<int>& layers_per_stage) {
  Partition p;
  int next = 0;
  for (std::size_t s = 0; s < layers_per_stage.size(); ++s) {
    StageRange r;
    r.first_layer = next;
    r.num_layers = layers_per_stage[s];
    r.has_embedding = s == 0;
    r.has_head = s + 1 == layers_per_stage.size();
    next += r.num_layers;
    p.stages.push_back(r);
  }
  return p;
}

const std::vector<int>& BalancedSplits::get(const std::vector<double>& layer_cost, int stages, double first_extra,
                                            double last_extra) {
  auto key = std::make_tuple(layer_cost, stages, first_extra, last_extra);
  if (const auto it = known_.find(key); it != known_.end()) return it->second;
  std::vector<int> sizes = split_balanced(layer_cost, stages, first_extra, last_extra);
  return known_.emplace(std::move(key), std::move(sizes)).first->second;
}

Partition make_partition(const ModelDesc& model, const RunSpec& run, BalancedSplits* splits) {
  const int L = model.spec().layers, P = run.model_stages();
  std::vector<int> sizes;
  if (!run.layers_per_stage.empty()) {
    sizes = run.layers_per_stage;
  } else if (run.remainder == Remainder::balanced) {
    auto weight = [&](const Cost& c) {
      return run.balance_by == BalanceBy::params ? static_cast<double>(c.params)
                                                 : c.forward_flops + c.backward_flops;
    };
    const int b = run.micro_batch_size;
    const std::vector<double> layer(static_cast<std::size_t>(L), weight(model.block(b)));
    const double first = weight(model.embedding(b)), last = weight(model.head(b));
    sizes = splits ? splits->get(layer, P, first, last) : split_balanced(layer, P, first, last);
  } else {
    sizes = split_even(L, P, run.remainder);
  }
  Partition p = partition_from_sizes(sizes);
  p.explicit_split = !run.layers_per_stage.empty();
  p.remainder = run.remainder;
  return p;
}

std::string layer_range_text(const StageRange& s, int origin) {
  return fmt::format("{}-{}", s.first_layer + origin, s.last_layer() + origin);
}

std::string built_range_text(int first, int last, int origin) {
  if (first < 0 || last < first) return "not built";
  return fmt::format("{}-{}", first + origin, last + origin);
}

}  // namespace pipebench
