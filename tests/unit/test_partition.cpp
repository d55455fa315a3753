// Partition rules of SPEC §3: first / last / balanced, explicit splits,
// origins, and the balanced optimiser against brute force.
#include <algorithm>
#include <functional>
#include <numeric>
#include <random>

#include <catch2/catch.hpp>

#include "pipebench/plan/partition.hpp"

using namespace pipebench;

TEST_CASE("split_even: base = L / P, remainder to the first or last stage", "[partition]") {
  CHECK(split_even(8, 2, Remainder::first) == std::vector<int>{4, 4});
  CHECK(split_even(10, 3, Remainder::first) == std::vector<int>{4, 3, 3});
  CHECK(split_even(10, 3, Remainder::last) == std::vector<int>{3, 3, 4});
  CHECK(split_even(27, 4, Remainder::first) == std::vector<int>{9, 6, 6, 6});
  CHECK(split_even(27, 4, Remainder::last) == std::vector<int>{6, 6, 6, 9});
  CHECK(split_even(5, 5, Remainder::first) == std::vector<int>{1, 1, 1, 1, 1});
  CHECK(split_even(7, 1, Remainder::last) == std::vector<int>{7});
  CHECK_THROWS(split_even(3, 4, Remainder::first));
  CHECK_THROWS(split_even(3, 0, Remainder::first));
}

namespace {
// Every composition of L into P positive parts, for brute force.
void compositions(int L, int P, std::vector<int>& cur, const std::function<void(const std::vector<int>&)>& f) {
  if (P == 1) {
    cur.push_back(L);
    f(cur);
    cur.pop_back();
    return;
  }
  for (int k = 1; k <= L - (P - 1); ++k) {
    cur.push_back(k);
    compositions(L - k, P - 1, cur, f);
    cur.pop_back();
  }
}

double max_cost(const std::vector<int>& sizes, const std::vector<double>& cost, double first, double last) {
  double worst = 0.0;
  int next = 0;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    double c = std::accumulate(cost.begin() + next, cost.begin() + next + sizes[s], 0.0);
    if (s == 0) c += first;
    if (s + 1 == sizes.size()) c += last;
    worst = std::max(worst, c);
    next += sizes[s];
  }
  return worst;
}
}  // namespace

TEST_CASE("split_balanced: optimal max stage cost, never an empty stage (brute force)", "[partition]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.5, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 10);
    const int P = 1 + static_cast<int>(rng() % static_cast<unsigned>(L));
    std::vector<double> cost(static_cast<std::size_t>(L));
    for (auto& c : cost) c = u(rng);
    const double first = trial % 3 == 0 ? 0.0 : u(rng) * 2, last = u(rng) * 3;
    const auto sizes = split_balanced(cost, P, first, last);
    INFO("L = " << L << ", P = " << P << ", trial " << trial);
    REQUIRE(sizes.size() == static_cast<std::size_t>(P));
    CHECK(std::accumulate(sizes.begin(), sizes.end(), 0) == L);
    CHECK(std::all_of(sizes.begin(), sizes.end(), [](int k) { return k >= 1; }));
    double best = 1e300;
    std::vector<int> cur;
    compositions(L, P, cur, [&](const std::vector<int>& c) { best = std::min(best, max_cost(c, cost, first, last)); });
    CHECK(max_cost(sizes, cost, first, last) == Approx(best));
  }
}

TEST_CASE("split_balanced: uniform layers give the even split; heavy ends get fewer layers", "[partition]") {
  const std::vector<double> ten(10, 1.0);
  CHECK(split_balanced(ten, 3, 0.0, 0.0) == std::vector<int>{4, 3, 3});
  CHECK(split_balanced(ten, 2, 0.0, 0.0) == std::vector<int>{5, 5});
  // A head worth 2 layers moves two layers off the last stage.
  CHECK(split_balanced(ten, 2, 0.0, 2.0) == std::vector<int>{6, 4});
  CHECK(split_balanced(ten, 2, 2.0, 0.0) == std::vector<int>{4, 6});
  // Even a huge head leaves the last stage one layer.
  CHECK(split_balanced(ten, 3, 0.0, 100.0) == std::vector<int>{5, 4, 1});
  CHECK(split_balanced(std::vector<double>(4, 1.0), 4, 5.0, 5.0) == std::vector<int>{1, 1, 1, 1});
}

// tune asks for the same balanced split at every size it probes: the cache
// must answer exactly what split_balanced does, for every argument it keys on.
TEST_CASE("BalancedSplits: split_balanced's answer for each argument, computed once", "[partition]") {
  BalancedSplits splits;
  const std::vector<double> ten(10, 1.0);
  const std::vector<int>& a = splits.get(ten, 2, 0.0, 2.0);
  CHECK(a == split_balanced(ten, 2, 0.0, 2.0));
  CHECK(&splits.get(ten, 2, 0.0, 2.0) == &a);  // the kept answer
  CHECK(splits.get(ten, 2, 2.0, 0.0) == split_balanced(ten, 2, 2.0, 0.0));
  CHECK(splits.get(ten, 3, 0.0, 100.0) == std::vector<int>{5, 4, 1});
  std::vector<double> heavy = ten;
  heavy[9] = 3.0;
  CHECK(splits.get(heavy, 2, 0.0, 2.0) == split_balanced(heavy, 2, 0.0, 2.0));
  CHECK(splits.get(heavy, 2, 0.0, 2.0) != a);
}

TEST_CASE("make_partition: explicit layers_per_stage, contiguous ranges, embedding and head", "[partition]") {
  ModelSpec m;
  m.layers = 10;
  const ModelDesc model(m, DType::fp32);
  RunSpec run;
  run.pipeline_size = 3;
  run.layers_per_stage = {3, 4, 3};
  const Partition p = make_partition(model, run);
  CHECK(p.explicit_split);
  REQUIRE(p.stages.size() == 3);
  CHECK(p.stages[0].first_layer == 0);
  CHECK(p.stages[1].first_layer == 3);
  CHECK(p.stages[2].first_layer == 7);
  CHECK(p.stages[2].last_layer() == 9);
  CHECK(p.stages[0].has_embedding);
  CHECK_FALSE(p.stages[0].has_head);
  CHECK_FALSE(p.stages[1].has_embedding);
  CHECK_FALSE(p.stages[1].has_head);
  CHECK(p.stages[2].has_head);
  CHECK(layer_range_text(p.stages[1], 0) == "3-6");
  CHECK(layer_range_text(p.stages[1], 1) == "4-7");
  // A failed run records -1, -1 for a rank that never built its stage: not "-1--1".
  CHECK(built_range_text(-1, -1, 0) == "not built");
  CHECK(built_range_text(-1, -1, 1) == "not built");
  CHECK(built_range_text(3, 6, 1) == "4-7");

  run.layers_per_stage.clear();
  run.remainder = Remainder::last;
  CHECK(make_partition(model, run).stages[2].num_layers == 4);
  run.pipeline_size = 1;
  const Partition single = make_partition(model, run);
  CHECK(single.stages[0].has_embedding);
  CHECK(single.stages[0].has_head);
}

TEST_CASE("make_partition balanced: by FLOPs the LM-head stage gets fewer layers; by params the embedding counts too",
          "[partition]") {
  ModelSpec m;
  m.hidden = 256;
  m.heads = 4;
  m.ffn_hidden = 1024;
  m.layers = 10;
  m.seq_len = 128;
  m.vocab = 8192;
  const ModelDesc model(m, DType::fp32);
  RunSpec run;
  run.pipeline_size = 3;
  run.micro_batch_size = 2;
  run.remainder = Remainder::balanced;
  const Partition by_flops = make_partition(model, run);
  std::vector<int> sizes;
  for (const auto& s : by_flops.stages) sizes.push_back(s.num_layers);
  // Block forward 436.2 MFLOP, head 1073.7 MFLOP (2.46 blocks), embedding 0:
  // (4,4,2) has maximum 4.46 blocks, the least possible.
  CHECK(sizes == std::vector<int>{4, 4, 2});
  run.balance_by = BalanceBy::params;
  sizes.clear();
  for (const auto& s : make_partition(model, run).stages) sizes.push_back(s.num_layers);
  // Block 789,760 params; embedding (8192+128)*256 = 2,129,920; head 2*256 + 256*8192 = 2,097,664.
  // (2,5,3) gives stage maxima 3.71M, 3.95M, 4.47M; every other split has a stage above 4.47M.
  CHECK(sizes == std::vector<int>{2, 5, 3});
}
