// The rank grid of a run (docs/parallel.md): its p × d × c × t ranks as
// coordinates (pipeline stage, data-parallel replica, context-parallel rank,
// tensor-parallel rank),
// in one of two documented orders, the groups each rank belongs to, and
// which ranks share a node. A plain value: no MPI. The runtime splits its
// communicators from the groups; the planner and tune size a run by it; the
// results file records every rank's coordinates.
//
// Orders (tensor always fastest, so a tensor group sits on one node; the
// context rank next, Megatron-LM's tp-cp-... order, so a context group sits
// on one node where c·t ranks fit):
//   tp-dp-pp  Megatron-LM's default: rank = t + T·(c + C·(d + D·p)) — data
//             next, pipeline outermost (a stage's replicas are neighbours,
//             so the gradient all-reduce stays inside a node where it can);
//   tp-pp-dp  Megatron-LM's --use-tp-pp-dp-mapping: rank = t + T·(c + C·(p +
//             P·d)) — a whole pipeline replica on consecutive ranks, data
//             outermost.
// Nodes: ranks [n·R, (n+1)·R) are node n, R = ranks per node (how Slurm's
// block distribution and Open MPI's --map-by slot place them).
#pragma once

#include <optional>
#include <vector>

#include "pipebench/core/job.hpp"  // RankOrder, a run's key

namespace pipebench::parallel {

struct GridShape {
  int pipeline = 1, data = 1, tensor = 1, context = 1;
  int size() const { return pipeline * data * tensor * context; }
};

struct Coord {
  int pipeline = 0, data = 0, tensor = 0, context = 0;
  bool operator==(const Coord&) const = default;
};

class RankGrid {
 public:
  // Throws Error when a degree is < 1 or ranks_per_node < 1.
  RankGrid(GridShape shape, RankOrder order, int ranks_per_node);

  const GridShape& shape() const { return shape_; }
  RankOrder order() const { return order_; }
  int size() const { return shape_.size(); }
  int ranks_per_node() const { return ranks_per_node_; }

  Coord coord(int rank) const;
  int rank(const Coord& c) const;

  // The ranks that share this rank's other coordinates, in coordinate order:
  // its pipeline (stage 0 first), its data-parallel group (replica 0 first),
  // its tensor group.
  std::vector<int> pipeline_group(int rank) const;
  std::vector<int> data_group(int rank) const;
  std::vector<int> tensor_group(int rank) const;
  std::vector<int> context_group(int rank) const;
  // The ranks holding this rank's parameters, whose gradients are reduced
  // together: its replicas' and context ranks' (d x c), replica-major.
  std::vector<int> gradient_group(int rank) const;

  int node(int rank) const { return rank / ranks_per_node_; }
  int nodes() const { return (size() + ranks_per_node_ - 1) / ranks_per_node_; }
  // Whether every rank of `group` is on one node (its collectives ride the
  // intra-node links).
  bool within_one_node(const std::vector<int>& group) const;

 private:
  std::vector<int> group(int rank, int Coord::*axis, int extent) const;
  GridShape shape_;
  RankOrder order_;
  int ranks_per_node_;
};

// A run's grid on the modelled machine: p × d × c × t in the run's rank_order,
// device.ranks_per_node ranks per node (0: the whole run on one node).
RankGrid run_grid(const RunSpec& run, const DeviceSpec& device);

// Ranks per node from a launcher's environment, as `getenv` gives them:
// Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, else Slurm's SLURM_NTASKS_PER_NODE,
// else the first count of SLURM_TASKS_PER_NODE ("4(x2),3" -> 4); nullopt
// when none is set or none parses. `env` looks a name up (null: unset).
std::optional<int> ranks_per_node_from_env(const char* (*env)(const char*));

}  // namespace pipebench::parallel
