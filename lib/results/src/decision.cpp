// The decision of a pipelined run against its baseline (seed 000,
// results/metrics.hpp): the stability test and its extension's rule, the
// memory, bubble and loss checks, the notes beside them, the speedup, and
// the decision's line and headline as the console and the reports print them.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "pipebench/core/units.hpp"
#include "pipebench/results/metrics.hpp"
#include "pipebench/results/robust_stats.hpp"

namespace pipebench {

namespace {
}  // namespace

namespace {
constexpr int kMinStableSteps = 5;  // fewest counted steps for a stability verdict
}  // namespace

StabilityTest stability_test(const std::vector<double>& y) {
  StabilityTest t;
  t.steps = static_cast<int>(y.size());
  const int n = t.steps;
  if (n < kMinStableSteps) {
    t.rise = t.low = t.high = std::numeric_limits<double>::quiet_NaN();
    return t;
  }
  const double median = compute_stats(y).median;
  const Interval slope = theil_sen_slope(y);
  const double scale = static_cast<double>(n - 1) / median;
  t.rise = slope.estimate * scale;
  t.low = slope.low * scale;
  t.high = slope.high * scale;
  if (t.low > kTrendMax) {
    t.verdict = Stability::fail;
  } else if (t.high <= kTrendMax) {
    t.verdict = Stability::pass;
  } else {
    std::vector<double> resid;  // around the fitted slope; their median absolute deviation is the noise
    for (int i = 0; i < n; ++i) resid.push_back(y[static_cast<std::size_t>(i)] - slope.estimate * i);
    const double mid = compute_stats(resid).median;
    for (auto& x : resid) x = std::fabs(x - mid);
    const double cv = 1.4826 * compute_stats(resid).median / median;
    t.steps_wanted = static_cast<int>(std::ceil(12.0 * std::pow(1.96 * cv / kTrendMax, 2.0)));
  }
  return t;
}

namespace {

std::vector<double> counted(const RunResult& r) {
  std::vector<double> v;
  for (std::size_t k = 0; k < r.step_time_s.size() && k < r.is_warmup.size(); ++k)
    if (!r.is_warmup[k]) v.push_back(r.step_time_s[k]);
  return v;
}

// The most counted steps a rerun is told to use.
constexpr int kMaxSuggestedRepeats = 1000;

// Seed 000's "stable step time" (stability_test) as a decision's reason:
// pass, fail, or inconclusive with the repeats that would tell; a run the
// stability extension went on with says how far.
std::string stability_check(const RunResult& r, bool& failed, bool& inconclusive) {
  const StabilityTest t = stability_test(counted(r));
  const int n = t.steps;
  auto rerun = [&](int want) {
    return fmt::format("rerun with --set train.repeats={}", std::clamp(want, std::max(n + 1, kMinStableSteps), kMaxSuggestedRepeats));
  };
  const std::string extended =
      r.repeats_extended > 0 ? fmt::format(" (open after {} counted steps, extended to {}: train.max_repeats)", r.repeats, n) : "";
  if (n < kMinStableSteps) {
    inconclusive = true;
    return fmt::format("stability: inconclusive — {} counted step(s), a trend needs {}; {}", n, kMinStableSteps,
                       rerun(2 * kMinStableSteps));
  }
  auto pct = [](double x) { return std::isfinite(x) ? fmt::format("{:+.1f}%", 100 * x) : std::string("unbounded"); };
  const std::string figures =
      fmt::format("step time changes {} over {} counted steps{} (95% interval {} to {}, Theil-Sen; limit +{:.0f}%)",
                  pct(t.rise), n, extended, pct(t.low), pct(t.high), 100 * kTrendMax);
  if (t.verdict == Stability::fail) {
    failed = true;
    return "stability: fail — " + figures + "; check stage balance before adding steps (seed 000)";
  }
  if (t.verdict == Stability::pass) return "stability: pass — " + figures;
  inconclusive = true;
  return "stability: inconclusive — " + figures + " is too wide to tell; " + rerun(std::max(t.steps_wanted, 2 * n));
}

// Seed 000's "peak memory below 90% of capacity on every rank".
std::string memory_check(const RunResult& r, bool& failed) {
  std::string worst;
  double worst_frac = 0.0;
  if (const int top = fullest_rank(r); top >= 0) {
    const auto i = static_cast<std::size_t>(top);
    worst_frac = capacity_fraction(r, i);
    worst = fmt::format("{} peaks at {} ({:.0f}% of capacity)", rank_label(r, i),
                        format_bytes(static_cast<double>(r.peak_mem_bytes[i])), 100 * worst_frac);
  }
  if (r.failure_kind == FailureKind::oom) {
    failed = true;
    return "memory: fail — out of memory; lower micro_batch_size or add stages; do not rely on swapping memory out "
           "(seed 000)";
  }
  if (worst.empty()) return "memory: not measured";
  if (worst_frac >= kMemoryWarnFraction) {
    failed = true;
    return fmt::format("memory: fail — {}, limit {:.0f}%: lower micro_batch_size or move layers off that stage (seed 000)",
                       worst, 100 * kMemoryWarnFraction);
  }
  return fmt::format("memory: pass — highest: {}, limit {:.0f}%", worst, 100 * kMemoryWarnFraction);
}

// On the sim backend, where every duration is modelled, the measured bubble
// must match the schedule's own: the simulator fed with this run's
// per-action medians (bubble_simulated). More than kBubbleGapMax above it is
// time the executor or the transport added (waits, scheduling).
std::string bubble_check(const RunResult& r, bool& failed, bool& inconclusive) {
  const double measured = r.bubble_measured_median, expected = r.bubble_simulated;
  if (!std::isfinite(measured) || !std::isfinite(expected)) {
    inconclusive = true;
    return "bubble: inconclusive — no measured or simulated bubble";
  }
  const std::string figures = fmt::format("measured {:.1f}% vs {:.1f}% for the schedule itself (simulated), limit +{:.0f} pts",
                                          100 * measured, 100 * expected, 100 * kBubbleGapMax);
  if (measured > expected + kBubbleGapMax) {
    failed = true;
    return "bubble: fail — " + figures + ": the executor or the transport adds idle time";
  }
  return "bubble: pass — " + figures;
}

// Seed 000's "loss trend equal to the baseline's".
std::string loss_check(const RunResult& r, const RunResult* base, bool& failed) {
  if (r.backend == BackendKind::sim) return "loss: not measured on sim (the sim backend computes no loss)";
  if (!base) return "loss: not compared (no baseline)";
  if (std::isnan(r.loss_max_rel_dev)) return "loss: not compared (no counted step in both runs)";
  const double tol = r.dtype == DType::fp32 ? kLossTolFp32 : kLossTolLowPrecision;
  if (r.loss_max_rel_dev > tol) {
    failed = true;
    return fmt::format("loss: fail — deviates from the baseline by {:.3g} (limit {:.0e}): check each stage's layer range "
                       "and the data seed (seed 000)",
                       r.loss_max_rel_dev, tol);
  }
  return fmt::format("loss: pass — within {:.3g} of the baseline's (limit {:.0e})", r.loss_max_rel_dev, tol);
}

double max_rel_loss_deviation(const RunResult& r, const RunResult& base) {
  double dev = kNaN;
  const std::size_t n = std::min(r.loss.size(), base.loss.size());
  for (std::size_t k = 0; k < n; ++k) {
    if (r.is_warmup[k] || !std::isfinite(r.loss[k]) || !std::isfinite(base.loss[k])) continue;
    const double d = std::fabs(r.loss[k] - base.loss[k]) / std::fabs(base.loss[k]);
    dev = std::isnan(dev) ? d : std::max(dev, d);
  }
  return dev;
}

}  // namespace

namespace {

// Seed 000's 30-50 short steps: fewer is said, with what to rerun.
std::string short_run_note(const RunResult& r) {
  const int n = static_cast<int>(counted(r).size());
  if (n >= kSeedShortSteps) return "";
  return fmt::format("steps: {} counted step(s), fewer than seed 000's 30-50: the verdicts rest on intervals over {} "
                     "step(s); rerun with --set train.repeats={} for the seed's evidence",
                     n, n, kSeedShortSteps);
}

// Clipping on more than kClipRateMax of the counted steps: flagged.
std::string clipping_note(const RunResult& r) {
  int n = 0, clipped = 0;
  for (std::size_t i = 0; i < r.is_warmup.size(); ++i) {
    if (r.is_warmup[i]) continue;
    ++n;
    clipped += i < r.clipped.size() && r.clipped[i] ? 1 : 0;
  }
  if (n == 0 || clipped <= kClipRateMax * n) return "";
  return fmt::format("clipping: flag — the gradient norm was clipped on {} of {} counted steps ({:.0f}%, above {:.0f}%): "
                     "lower the learning rate or raise train.grad_clip; frequent clipping hides a diverging run (seed 000)",
                     clipped, n, 100.0 * clipped / n, 100 * kClipRateMax);
}

}  // namespace

std::vector<double> rolling_mean(const std::vector<double>& values, int window) {
  std::vector<double> out;
  double sum = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    sum += values[i];
    if (i >= static_cast<std::size_t>(window)) sum -= values[i - static_cast<std::size_t>(window)];
    out.push_back(sum / static_cast<double>(std::min<std::size_t>(i + 1, static_cast<std::size_t>(window))));
  }
  return out;
}


void set_speedup(RunResult& r, const RunResult& base) {
  const double gb = base.spec.global_batch(), gr = r.spec.global_batch();
  r.speedup_per_sample = gb != gr && gb > 0 && gr > 0;
  std::vector<double> b = counted(base), p = counted(r);
  if (r.speedup_per_sample) {
    for (auto& t : b) t /= gb;
    for (auto& t : p) t /= gr;
  }
  const Interval s = speedup_interval(b, p);
  r.speedup = s.estimate;
  r.speedup_low = s.low;
  r.speedup_high = s.high;
}

std::string global_batch_note(const RunResult& r, const RunResult& base) {
  const int gb = base.spec.global_batch(), gr = r.spec.global_batch();
  if (gb == gr) return "";
  auto parts = [](const RunSpec& s) {
    return s.data_parallel > 1 ? fmt::format("{} x {} x {} replicas", s.micro_batch_size, s.num_microbatches, s.data_parallel)
                               : fmt::format("{} x {}", s.micro_batch_size, s.num_microbatches);
  };
  return fmt::format("global batch: {} samples per step ({}) vs the baseline's {} ({}): the speedup compares "
                     "time per sample, not per step",
                     gr, parts(r.spec), gb, parts(base.spec));
}

// The decision of one pipelined run (seed 000): memory, stability and loss
// each pass, fail, are inconclusive or not measured; any fail is
// not_feasible, all measured ones passing is feasible, else inconclusive.
void decide(std::vector<RunResult>& runs) {
  for (auto& r : runs) {
    r.speedup = r.speedup_low = r.speedup_high = kNaN;
    if (r.status == RunStatus::skipped) continue;
    const RunResult* base = nullptr;
    for (const auto& other : runs)
      if (!r.baseline.empty() && other.spec.name == r.baseline && other.status == RunStatus::ok) base = &other;
    if (base) {
      r.loss_max_rel_dev = max_rel_loss_deviation(r, *base);
      if (r.status == RunStatus::ok) set_speedup(r, *base);
    }
    std::vector<std::string>& why = r.decision_reasons;
    why.clear();
    if (r.spec.ranks() == 1) {
      r.decision = "not_applicable";
      why.push_back("single-stage run (a baseline)");
      continue;
    }
    if (r.status == RunStatus::failed && r.failure_kind == FailureKind::interrupted) {
      // Nothing was measured: no verdict on the configuration either way.
      r.decision = "inconclusive";
      why.push_back(fmt::format("not measured: {}; rerun it", r.failure_message));
      continue;
    }
    bool failed = false, inconclusive = false;
    if (r.status == RunStatus::failed) {
      failed = true;
      why.push_back(fmt::format("run failed ({}): {}", failure_origin(r), r.failure_message));
    }
    why.push_back(memory_check(r, failed));
    if (r.status == RunStatus::ok) why.push_back(stability_check(r, failed, inconclusive));
    if (r.status == RunStatus::ok && r.backend == BackendKind::sim) why.push_back(bubble_check(r, failed, inconclusive));
    why.push_back(loss_check(r, base, failed));
    if (base && r.status == RunStatus::ok)
      if (std::string note = global_batch_note(r, *base); !note.empty()) why.push_back(std::move(note));
    if (r.status == RunStatus::ok)
      for (const std::string& note : {short_run_note(r), clipping_note(r)})
        if (!note.empty()) why.push_back(note);
    r.decision = failed ? "not_feasible" : inconclusive ? "inconclusive" : "feasible";
  }
}

std::string format_speedup(const RunResult& r) {
  if (!std::isfinite(r.speedup)) return "-";
  const char* per = r.speedup_per_sample ? " per sample" : "";
  // Too few counted steps for a bound on one side (Hodges-Lehmann): say so.
  const bool lo = std::isfinite(r.speedup_low) && r.speedup_low > 0.0, hi = std::isfinite(r.speedup_high);
  if (lo && hi) return fmt::format("{:.2f}x{} ({:.2f}-{:.2f})", r.speedup, per, r.speedup_low, r.speedup_high);
  if (lo) return fmt::format("{:.2f}x{} ({:.2f} or more)", r.speedup, per, r.speedup_low);
  if (hi) return fmt::format("{:.2f}x{} ({:.2f} or less)", r.speedup, per, r.speedup_high);
  return fmt::format("{:.2f}x{} (no interval: too few steps)", r.speedup, per);
}

std::vector<std::string> decision_concerns(const RunResult& r) {
  std::vector<std::string> out;
  if (r.decision == "not_applicable") return out;
  for (const auto& why : r.decision_reasons)
    if (why.find(": pass") == std::string::npos && why.find(": not ") == std::string::npos) out.push_back(why);
  return out;
}

std::string decision_headline(const RunResult& r) {
  const std::vector<std::string> concerns = decision_concerns(r);
  if (!concerns.empty()) return concerns.front();
  return r.decision_reasons.empty() ? std::string() : r.decision_reasons.front();
}

std::string decision_line(const RunResult& r) {
  if (r.decision == "not_applicable" || r.status == RunStatus::skipped) return "";
  const std::string speed = std::isfinite(r.speedup) ? fmt::format("; {} the baseline's speed", format_speedup(r)) : "";
  if (r.decision == "feasible") {
    std::string passed;
    for (const auto& why : r.decision_reasons)
      if (const auto at = why.find(": pass"); at != std::string::npos)
        passed += (passed.empty() ? "" : ", ") + why.substr(0, at);
    return fmt::format("decision: {} feasible — {} pass{}", r.spec.name, passed.empty() ? "every condition" : passed, speed);
  }
  const std::vector<std::string> concerns = decision_concerns(r);
  return fmt::format("decision: {} {} — {}", r.spec.name, r.decision, concerns.empty() ? std::string("-") : concerns.front());
}

}  // namespace pipebench
