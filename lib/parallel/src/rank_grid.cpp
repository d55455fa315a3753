#include "pipebench/parallel/rank_grid.hpp"

#include <charconv>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"

namespace pipebench::parallel {

RankGrid::RankGrid(GridShape shape, RankOrder order, int ranks_per_node)
    : shape_(shape), order_(order), ranks_per_node_(ranks_per_node) {
  if (shape.pipeline < 1 || shape.data < 1 || shape.tensor < 1 || shape.context < 1)
    throw Error(fmt::format("rank grid: degrees must be at least 1 (pipeline {}, data {}, tensor {}, context {})",
                            shape.pipeline, shape.data, shape.tensor, shape.context));
  if (ranks_per_node < 1) throw Error(fmt::format("rank grid: ranks per node must be at least 1, got {}", ranks_per_node));
}

RankGrid run_grid(const RunSpec& run, const DeviceSpec& device) {
  return RankGrid({run.pipeline_size, run.data_parallel, run.tensor_parallel, run.context_parallel}, run.rank_order,
                  device.ranks_per_node > 0 ? device.ranks_per_node : run.ranks());
}

Coord RankGrid::coord(int rank) const {
  if (rank < 0 || rank >= size()) throw Error(fmt::format("rank grid: rank {} outside [0, {})", rank, size()));
  Coord c;
  c.tensor = rank % shape_.tensor;
  c.context = rank / shape_.tensor % shape_.context;
  const int rest = rank / shape_.tensor / shape_.context;
  if (order_ == RankOrder::tp_dp_pp) {
    c.data = rest % shape_.data;
    c.pipeline = rest / shape_.data;
  } else {
    c.pipeline = rest % shape_.pipeline;
    c.data = rest / shape_.pipeline;
  }
  return c;
}

int RankGrid::rank(const Coord& c) const {
  if (c.pipeline < 0 || c.pipeline >= shape_.pipeline || c.data < 0 || c.data >= shape_.data || c.tensor < 0 ||
      c.tensor >= shape_.tensor || c.context < 0 || c.context >= shape_.context)
    throw Error(fmt::format("rank grid: coordinates (pipeline {}, data {}, tensor {}, context {}) outside ({}, {}, {}, {})",
                            c.pipeline, c.data, c.tensor, c.context, shape_.pipeline, shape_.data, shape_.tensor,
                            shape_.context));
  const int outer = order_ == RankOrder::tp_dp_pp ? c.data + shape_.data * c.pipeline : c.pipeline + shape_.pipeline * c.data;
  return c.tensor + shape_.tensor * (c.context + shape_.context * outer);
}

std::vector<int> RankGrid::group(int r, int Coord::*axis, int extent) const {
  Coord c = coord(r);
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(extent));
  for (int i = 0; i < extent; ++i) {
    c.*axis = i;
    out.push_back(rank(c));
  }
  return out;
}

std::vector<int> RankGrid::pipeline_group(int r) const { return group(r, &Coord::pipeline, shape_.pipeline); }
std::vector<int> RankGrid::data_group(int r) const { return group(r, &Coord::data, shape_.data); }
std::vector<int> RankGrid::tensor_group(int r) const { return group(r, &Coord::tensor, shape_.tensor); }
std::vector<int> RankGrid::context_group(int r) const { return group(r, &Coord::context, shape_.context); }

std::vector<int> RankGrid::gradient_group(int r) const {
  std::vector<int> out;
  for (int replica : data_group(r)) {
    const std::vector<int> ranks = context_group(replica);
    out.insert(out.end(), ranks.begin(), ranks.end());
  }
  return out;
}

bool RankGrid::within_one_node(const std::vector<int>& g) const {
  for (int r : g)
    if (node(r) != node(g.front())) return false;
  return true;
}

namespace {

// The leading decimal count of `text` (>= 1), or nullopt.
std::optional<int> leading_count(const char* text) {
  if (!text) return std::nullopt;
  const std::string_view s(text);
  int n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end == s.data() || n < 1) return std::nullopt;
  return n;
}

}  // namespace

std::optional<int> ranks_per_node_from_env(const char* (*env)(const char*)) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})
    if (auto n = leading_count(env(name))) return n;
  return std::nullopt;
}

}  // namespace pipebench::parallel
