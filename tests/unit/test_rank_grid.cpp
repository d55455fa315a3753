// The rank grid (lib/parallel, docs/parallel.md): both orders' formulas,
// coordinates <-> ranks as a bijection, the groups, nodes, and ranks per
// node from a launcher's environment.
#include <map>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/parallel/rank_grid.hpp"

using namespace pipebench;
using namespace pipebench::parallel;

TEST_CASE("rank grid: Megatron's order, tensor fastest, then data, pipeline outermost", "[rank_grid]") {
  const RankGrid g({4, 2, 2}, RankOrder::tp_dp_pp, 8);  // p 4, d 2, t 2: 16 ranks on 2 nodes
  REQUIRE(g.size() == 16);
  CHECK(g.coord(0) == Coord{0, 0, 0});
  CHECK(g.coord(1) == Coord{0, 0, 1});
  CHECK(g.coord(2) == Coord{0, 1, 0});
  CHECK(g.coord(4) == Coord{1, 0, 0});
  CHECK(g.coord(15) == Coord{3, 1, 1});
  CHECK(g.pipeline_group(0) == std::vector<int>{0, 4, 8, 12});
  CHECK(g.pipeline_group(7) == std::vector<int>{3, 7, 11, 15});
  CHECK(g.data_group(5) == std::vector<int>{5, 7});
  CHECK(g.tensor_group(6) == std::vector<int>{6, 7});
  // A stage's replicas are neighbours: the data group stays on one node; the pipeline spans both.
  CHECK(g.within_one_node(g.data_group(9)));
  CHECK_FALSE(g.within_one_node(g.pipeline_group(0)));
  CHECK(g.nodes() == 2);
}

TEST_CASE("rank grid: the other order keeps a pipeline replica on consecutive ranks", "[rank_grid]") {
  const RankGrid g({4, 2, 1}, RankOrder::tp_pp_dp, 4);
  CHECK(g.pipeline_group(0) == std::vector<int>{0, 1, 2, 3});
  CHECK(g.pipeline_group(5) == std::vector<int>{4, 5, 6, 7});
  CHECK(g.data_group(1) == std::vector<int>{1, 5});
  CHECK(g.within_one_node(g.pipeline_group(6)));
  CHECK_FALSE(g.within_one_node(g.data_group(0)));
}

TEST_CASE("rank grid: coordinates and ranks are a bijection; groups partition the ranks", "[rank_grid]") {
  for (const RankOrder order : {RankOrder::tp_dp_pp, RankOrder::tp_pp_dp})
    for (const GridShape shape : {GridShape{1, 1, 1}, GridShape{3, 1, 1}, GridShape{1, 5, 1}, GridShape{3, 2, 4}, GridShape{2, 3, 2}}) {
      INFO("order " << pipebench::to_string(order) << ", shape " << shape.pipeline << "x" << shape.data << "x" << shape.tensor);
      const RankGrid g(shape, order, 3);
      std::set<int> seen;
      std::map<std::vector<int>, int> data_groups;
      for (int r = 0; r < g.size(); ++r) {
        CHECK(g.rank(g.coord(r)) == r);
        seen.insert(g.rank(g.coord(r)));
        const auto dg = g.data_group(r);
        CHECK(dg.size() == static_cast<std::size_t>(shape.data));
        CHECK(dg[static_cast<std::size_t>(g.coord(r).data)] == r);
        ++data_groups[dg];
        const auto pg = g.pipeline_group(r);
        CHECK(pg[static_cast<std::size_t>(g.coord(r).pipeline)] == r);
      }
      CHECK(seen.size() == static_cast<std::size_t>(g.size()));
      CHECK(data_groups.size() == static_cast<std::size_t>(shape.pipeline * shape.tensor));
      for (const auto& [grp, count] : data_groups) CHECK(count == shape.data);  // each member found it once
    }
}

TEST_CASE("rank grid: bad degrees and coordinates are errors", "[rank_grid]") {
  CHECK_THROWS_AS(RankGrid({0, 1, 1}, RankOrder::tp_dp_pp, 1), Error);
  CHECK_THROWS_AS(RankGrid({1, 1, 1}, RankOrder::tp_dp_pp, 0), Error);
  const RankGrid g({2, 2, 1}, RankOrder::tp_dp_pp, 4);
  CHECK_THROWS_WITH(g.coord(4), Catch::Contains("rank 4 outside [0, 4)"));
  CHECK_THROWS_AS(g.rank({2, 0, 0}), Error);
}

namespace {
std::map<std::string, std::string> fake_env;
const char* lookup(const char* name) {
  const auto it = fake_env.find(name);
  return it == fake_env.end() ? nullptr : it->second.c_str();
}
}  // namespace

TEST_CASE("rank grid: ranks per node from Open MPI's or Slurm's environment", "[rank_grid]") {
  fake_env.clear();
  CHECK(ranks_per_node_from_env(lookup) == std::nullopt);
  fake_env["SLURM_TASKS_PER_NODE"] = "4(x2),3";
  CHECK(ranks_per_node_from_env(lookup) == 4);
  fake_env["SLURM_NTASKS_PER_NODE"] = "8";
  CHECK(ranks_per_node_from_env(lookup) == 8);
  fake_env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  CHECK(ranks_per_node_from_env(lookup) == 2);
  fake_env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "junk";
  CHECK(ranks_per_node_from_env(lookup) == 8);  // falls through to the next that parses
  fake_env.clear();
}
