// Layer split across pipeline stages (SPEC §3, seed 000).
//
// Invariants of every Partition: stages are contiguous, in order, cover
// layers 0..L-1 exactly once, and no stage is empty. Stage 0 holds the
// embedding, the last stage the head (with one stage, both).
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pipebench/core/job.hpp"
#include "pipebench/model/model.hpp"

namespace pipebench {

struct StageRange {
  int first_layer = 0;  // 0-based, internal numbering
  int num_layers = 0;
  bool has_embedding = false;
  bool has_head = false;

  int last_layer() const { return first_layer + num_layers - 1; }
};

struct Partition {
  std::vector<StageRange> stages;
  bool explicit_split = false;  // from layers_per_stage rather than `remainder`
  Remainder remainder = Remainder::first;
};

// base = L / P, rem = L % P. first: stage 0 gets base + rem; last: the last
// stage does. Requires 1 <= P <= L.
std::vector<int> split_even(int layers, int stages, Remainder where);

// Contiguous split minimising the largest stage cost, where stage s costs the
// sum of its layers' costs plus `first_extra` (s == 0) and `last_extra`
// (s == P-1). No stage is empty. Among the splits reaching that minimum, the
// most even one (least sum of squared stage costs) wins; remaining ties give
// earlier stages more layers, so the result is deterministic. O(P * L^2).
std::vector<int> split_balanced(const std::vector<double>& layer_cost, int stages,
                                double first_extra, double last_extra);

// split_balanced's answers kept by their exact arguments, for a caller that
// asks for the same split many times (tune: every layout is probed at several
// micro-batch sizes, fractions of the capacity and replica counts).
class BalancedSplits {
 public:
  const std::vector<int>& get(const std::vector<double>& layer_cost, int stages, double first_extra,
                              double last_extra);

 private:
  std::map<std::tuple<std::vector<double>, int, double, double>, std::vector<int>> known_;
};

// The run's partition into run.model_stages() contiguous pieces (one per
// virtual stage: pipeline_size x virtual_stages_per_rank), from its explicit
// layers_per_stage, else its remainder rule.
// `balanced` weighs pieces by forward+backward FLOPs or by parameters
// (run.balance_by), using `model`; through `splits` when given.
Partition make_partition(const ModelDesc& model, const RunSpec& run, BalancedSplits* splits = nullptr);

Partition partition_from_sizes(const std::vector<int>& layers_per_stage);

// "a-b" in the run's numbering origin (0 or 1).
std::string layer_range_text(const StageRange& s, int origin);
// A stage's built layers [first, last] (0-based) shown from `origin`; a rank
// that never built its stage (a failed or interrupted run records -1, -1)
// reads "not built".
std::string built_range_text(int first, int last, int origin);

}  // namespace pipebench
