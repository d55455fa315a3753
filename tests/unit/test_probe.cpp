// The micro-batch probe's search and classification, with a fake launcher
// (tests/probe/fake_trial.sh) standing in for mpirun: every outcome and every
// stop condition.
#include <limits>
#include <cstdlib>

#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/probe/probe.hpp"

using namespace pipebench;

namespace {

struct FakeEnv {
  explicit FakeEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* v : {"FAKE_LIMIT", "FAKE_ERROR_FROM", "FAKE_NAN_AT", "FAKE_SLEEP_AT", "FAKE_DELAY"}) unsetenv(v);
    for (const auto& [k, v] : vars) setenv(k, v, 1);
  }
  ~FakeEnv() {
    for (const char* v : {"FAKE_LIMIT", "FAKE_ERROR_FROM", "FAKE_NAN_AT", "FAKE_SLEEP_AT", "FAKE_DELAY"}) unsetenv(v);
  }
};

ProbeOptions options(int lo = 1, int hi = 256) {
  ProbeOptions o;
  o.job_path = "probe.toml";
  o.run_name = "pipe";
  o.ranks = 2;
  o.lo = lo;
  o.hi = hi;
  o.launcher = std::string(PIPEBENCH_SOURCE_DIR) + "/tests/probe/fake_trial.sh {ranks}";
  o.trial_dir = "/tmp/pipebench-probe-test";
  o.trial_timeout_s = 20;
  return o;
}

std::vector<int> sizes(const ProbeResult& r) {
  std::vector<int> v;
  for (const auto& t : r.trials) v.push_back(t.micro_batch_size);
  return v;
}

}  // namespace

TEST_CASE("classification: OOM signatures, plain errors, NaN, timeouts", "[probe]") {
  CHECK(classify_trial(0, false, "  -- pipe: status ok") == TrialOutcome::ok);
  // A trial that did not run the run is never a fit.
  CHECK(classify_trial(0, false, "") == TrialOutcome::error);  // e.g. --launcher "true"
  CHECK(classify_trial(5, false, "== run pipe: skipped (needs 2 ranks, the world has 1)") == TrialOutcome::error);
  CHECK(classify_trial(0, false, "== run pipe: skipped (needs 2 ranks, the world has 1)\n  -- pipe: status ok") == TrialOutcome::error);
  CHECK(classify_trial(5, false, "rank 0: out of memory: tried to allocate 2 GiB") == TrialOutcome::oom);
  CHECK(classify_trial(1, false, "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate") == TrialOutcome::oom);
  CHECK(classify_trial(1, false, "cudaErrorMemoryAllocation") == TrialOutcome::oom);
  CHECK(classify_trial(1, false, "CUBLAS_STATUS_ALLOC_FAILED") == TrialOutcome::oom);
  CHECK(classify_trial(2, false, "pipebench: invalid workload: x.toml:3: model.hiden: unknown key") == TrialOutcome::error);
  CHECK(classify_trial(127, false, "sh: 1: mpirun: not found") == TrialOutcome::error);
  CHECK(classify_trial(5, false, "status failed (nan on rank 1)") == TrialOutcome::nan);
  CHECK(classify_trial(5, false, "status failed (timeout on rank 0)") == TrialOutcome::timeout);
  CHECK(classify_trial(137, true, "") == TrialOutcome::timeout);
}

TEST_CASE("trial command: launcher with {ranks}, the run's micro-batch, no warm-up, quoted", "[probe]") {
  ProbeOptions o = options();
  o.launcher = "srun --mpi=pmix -n {ranks}";
  o.pipebench = "/opt/pipe bench/pipebench";
  o.overrides = {"device.memory_capacity=8GiB"};
  o.steps = 2;
  const std::string c = trial_command(o, 12);
  CHECK(c == "srun --mpi=pmix -n 2 '/opt/pipe bench/pipebench' run probe.toml --run pipe --set "
             "device.memory_capacity=8GiB --set run.pipe.micro_batch_size=12 --set train.warmup=0 --set "
             "train.repeats=2 -o /tmp/pipebench-probe-test --label probe-mbs12 --probe-trial");
}

TEST_CASE("bisection converges on the exact limit in at most log2(hi) + 1 trials", "[probe]") {
  FakeEnv env{{"FAKE_LIMIT", "37"}};
  const ProbeResult r = run_probe(options());
  CHECK(r.max_micro_batch == 37);
  CHECK(r.recommended_micro_batch == 29);
  CHECK(sizes(r) == std::vector<int>{1, 128, 64, 32, 48, 40, 36, 38, 37});
  CHECK(r.trials.size() <= 9);
  CHECK_THAT(r.stop_reason, Catch::Contains("converged: 37 fits, 38 does not"));
}

TEST_CASE("lo that does not fit stops at once", "[probe]") {
  FakeEnv env{{"FAKE_LIMIT", "0"}};
  const ProbeResult r = run_probe(options());
  CHECK(r.max_micro_batch == 0);
  CHECK(r.recommended_micro_batch == 0);
  CHECK(r.trials.size() == 1);
  CHECK(r.trials[0].outcome == TrialOutcome::oom);
  CHECK_THAT(r.stop_reason, Catch::Contains("(lo) does not fit"));
}

TEST_CASE("hi that fits is tried and reported", "[probe]") {
  FakeEnv env{{"FAKE_LIMIT", "1000"}};
  const ProbeResult r = run_probe(options(1, 64));
  CHECK(r.max_micro_batch == 64);
  CHECK(sizes(r) == std::vector<int>{1, 32, 48, 56, 60, 62, 63, 64});
  CHECK_THAT(r.stop_reason, Catch::Contains("hi = 64 fits"));
}

TEST_CASE("a plain error is not a memory limit: stop with the output", "[probe]") {
  FakeEnv env{{"FAKE_LIMIT", "100"}, {"FAKE_ERROR_FROM", "100"}};
  const ProbeResult r = run_probe(options());
  REQUIRE(r.trials.size() == 2);
  CHECK(r.trials[1].outcome == TrialOutcome::error);
  CHECK(r.trials[1].exit_code == 2);
  CHECK_THAT(r.trials[1].output_tail, Catch::Contains("unknown key"));
  CHECK(r.max_micro_batch == 1);
  CHECK_THAT(r.stop_reason, Catch::Contains("without an out-of-memory signature"));
}

TEST_CASE("an error at lo says to fix the run first", "[probe]") {
  FakeEnv env{{"FAKE_ERROR_FROM", "1"}};
  const ProbeResult r = run_probe(options());
  CHECK(r.trials.size() == 1);
  CHECK(r.max_micro_batch == 0);
  CHECK_THAT(r.stop_reason, Catch::Contains("fix the run first"));
}

TEST_CASE("NaN is a numerical failure: it ran, so memory fitted", "[probe]") {
  FakeEnv env{{"FAKE_NAN_AT", "12"}};
  const ProbeResult r = run_probe(options(1, 16));
  CHECK(sizes(r) == std::vector<int>{1, 8, 12, 14, 15, 16});
  CHECK(r.trials[2].outcome == TrialOutcome::nan);
  CHECK(r.max_micro_batch == 16);
}

TEST_CASE("two consecutive failures mixing OOM and non-OOM stop the search", "[probe]") {
  FakeEnv env{{"FAKE_LIMIT", "100"}, {"FAKE_NAN_AT", "64"}};
  const ProbeResult r = run_probe(options());
  CHECK(sizes(r) == std::vector<int>{1, 128, 64});
  CHECK(r.trials[1].outcome == TrialOutcome::oom);
  CHECK(r.trials[2].outcome == TrialOutcome::nan);
  CHECK(r.max_micro_batch == 1);
  CHECK_THAT(r.stop_reason, Catch::Contains("two consecutive failures mixing") && Catch::Contains("oom then nan at 64"));
}

TEST_CASE("a trial past its timeout is killed and stops the search", "[probe]") {
  FakeEnv env{{"FAKE_LIMIT", "100"}, {"FAKE_SLEEP_AT", "128"}};
  ProbeOptions o = options();
  o.trial_timeout_s = 1.0;
  const ProbeResult r = run_probe(o);
  REQUIRE(r.trials.size() == 2);
  CHECK(r.trials[1].outcome == TrialOutcome::timeout);
  CHECK(r.trials[1].seconds < 10.0);
  CHECK(r.max_micro_batch == 1);
  CHECK_THAT(r.stop_reason, Catch::Contains("timed out"));
}

TEST_CASE("invalid bounds are rejected", "[probe]") {
  CHECK_THROWS(run_probe(options(4, 4)));
  CHECK_THROWS(run_probe(options(0, 4)));
}

TEST_CASE("a trial timeout that is not a positive number of seconds is refused", "[probe]") {
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), 0.0, -5.0, std::numeric_limits<double>::infinity()}) {
    ProbeOptions o = options();
    o.trial_timeout_s = bad;
    CHECK_THROWS_AS(run_probe(o), ConfigError);
  }
}

TEST_CASE("a launcher that starts nothing finds no fit", "[probe]") {
  ProbeOptions o = options(1, 8);
  o.launcher = "true";  // exits 0 and prints nothing: the run never ran
  const ProbeResult r = run_probe(o);
  REQUIRE(r.trials.size() == 1);
  CHECK(r.trials[0].outcome == TrialOutcome::error);
  CHECK(r.max_micro_batch == 0);
  CHECK(r.recommended_micro_batch == 0);
}

TEST_CASE("a confirmed prediction takes two trials: the prediction fits, one above does not", "[probe]") {
  FakeEnv env{{"FAKE_LIMIT", "37"}};
  ProbeOptions o = options();
  o.predicted = 37;
  const ProbeResult r = run_probe(o);
  CHECK(r.max_micro_batch == 37);
  CHECK(sizes(r) == std::vector<int>{37, 38});
  CHECK_THAT(r.stop_reason, Catch::Contains("confirmed the planner's prediction"));
}

TEST_CASE("a prediction too high falls back to bisection below it", "[probe]") {
  FakeEnv env{{"FAKE_LIMIT", "37"}};
  ProbeOptions o = options();
  o.predicted = 40;
  const ProbeResult r = run_probe(o);
  CHECK(r.max_micro_batch == 37);
  CHECK(sizes(r) == std::vector<int>{40, 1, 20, 30, 35, 37, 38});
  CHECK_THAT(r.stop_reason, Catch::Contains("converged: 37 fits, 38 does not"));
}

TEST_CASE("a prediction too low falls back to bisection above it", "[probe]") {
  FakeEnv env{{"FAKE_LIMIT", "37"}};
  ProbeOptions o = options(1, 64);
  o.predicted = 30;
  const ProbeResult r = run_probe(o);
  CHECK(r.max_micro_batch == 37);
  CHECK(sizes(r).front() == 30);
  CHECK(sizes(r)[1] == 31);
  CHECK(r.trials.size() <= 2 + 6);
  CHECK_THAT(r.stop_reason, Catch::Contains("converged: 37 fits, 38 does not"));
}

TEST_CASE("a predicted limit that errors stops with the output, as a bisection trial would", "[probe]") {
  FakeEnv env{{"FAKE_ERROR_FROM", "38"}};
  ProbeOptions o = options();
  o.predicted = 37;
  const ProbeResult r = run_probe(o);
  CHECK(r.max_micro_batch == 37);
  CHECK(r.trials.size() == 2);
  CHECK_THAT(r.stop_reason, Catch::Contains("failed without an out-of-memory signature"));
}

TEST_CASE("progress: each trial's start with the trials still possible, ticks while it runs, a time estimate", "[probe]") {
  FakeEnv env{{"FAKE_LIMIT", "37"}, {"FAKE_DELAY", "0.25"}};
  std::vector<ProbeProgress> starts, ticks;
  int finished = 0;
  ProbeObserver obs;
  obs.every_s = 0.1;
  obs.on_start = [&](const ProbeProgress& p) { starts.push_back(p); };
  obs.on_tick = [&](const ProbeProgress& p) { ticks.push_back(p); };
  obs.on_trial = [&](const ProbeTrial&) { ++finished; };
  const ProbeResult r = run_probe(options(1, 64), obs);
  CHECK(r.max_micro_batch == 37);
  REQUIRE(starts.size() == r.trials.size());
  CHECK(finished == static_cast<int>(r.trials.size()));
  for (std::size_t i = 0; i < starts.size(); ++i) {
    CHECK(starts[i].trial == static_cast<int>(i) + 1);
    CHECK(starts[i].micro_batch_size == r.trials[i].micro_batch_size);
    CHECK(starts[i].expected >= starts[i].trial);
    CHECK(starts[i].expected <= 2 + 7);  // lo, log2(64) bisection trials, hi
    CHECK((starts[i].eta_s >= 0) == (i > 0));  // known once a trial has ended
  }
  CHECK(starts.back().expected == static_cast<int>(r.trials.size()));
  REQUIRE(ticks.size() >= r.trials.size());  // 0.25 s trials, a tick every 0.1 s
  CHECK(ticks.front().elapsed_s >= 0.1);
}
