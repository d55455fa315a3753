#include "pipebench/probe/probe.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "pipebench/core/clock.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/posix.hpp"
#include "pipebench/plan/tune.hpp"  // recommended_micro_batch
#include "pipebench/results/results.hpp"

namespace pipebench {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The last `lines` lines of `s` (all of it when shorter).
std::string tail_lines(const std::string& s, std::size_t lines) {
  std::size_t start = s.size();
  if (start > 0 && s[start - 1] == '\n') --start;  // a trailing newline ends the last line
  for (std::size_t seen = 0; start > 0; --start)
    if (s[start - 1] == '\n' && ++seen == lines) break;
  return s.substr(start);
}

// A terminating signal while a command runs: its process group is its own
// (Ctrl-C does not reach it), so the waiting process stops it, then ends
// with the signal. Every signal whose default action ends a process.
volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }
constexpr std::array kStopSignals{SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU};

// The stop handlers installed for as long as it lives; the old ones back after.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction stop {};
    stop.sa_handler = on_stop_signal;
    sigemptyset(&stop.sa_mask);
    for (std::size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &stop, &old_[i]);
  }
  ~StopSignals() { restore(); }
  void restore() {
    for (std::size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &old_[i], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  std::array<struct sigaction, kStopSignals.size()> old_{};
};

// Ends the process group `pid` leads: SIGTERM, up to `grace_s` to exit, SIGKILL.
void stop_group(pid_t pid, int& status, double grace_s) {
  kill(-pid, SIGTERM);
  const double until = now_s() + grace_s;
  while (waitpid(pid, &status, WNOHANG) == 0 && now_s() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
}

}  // namespace

TrialOutcome classify_trial(int exit_code, bool timed_out, const std::string& output) {
  if (timed_out) return TrialOutcome::timeout;
  const std::string o = lower(output);
  // Out-of-memory signatures: pipebench's tracker, PyTorch/CUDA, NCCL, cuBLAS.
  for (const char* sig : {"out of memory", "cudaerrormemoryallocation", "outofmemoryerror", "cublas_status_alloc_failed",
                          "failed to allocate"})
    if (o.find(sig) != std::string::npos) return TrialOutcome::oom;
  // A fit needs the run to have run: "status ok" printed, nothing skipped
  // (a launch with too few ranks skips the run; a launcher that starts
  // nothing exits 0 and prints nothing).
  if (o.find(": skipped (") != std::string::npos) return TrialOutcome::error;
  if (exit_code == 0) return o.find("status ok") != std::string::npos ? TrialOutcome::ok : TrialOutcome::error;
  // pipebench run: "status failed (nan on rank 1)", or a loss reported as nan/inf.
  if (o.find("(nan on rank") != std::string::npos || o.find("failure_kind nan") != std::string::npos) return TrialOutcome::nan;
  if (o.find("(timeout on rank") != std::string::npos) return TrialOutcome::timeout;
  return TrialOutcome::error;
}

std::string launch_command(const std::string& launcher, int ranks, const std::vector<std::string>& args) {
  std::string cmd = launcher;
  for (std::size_t p; (p = cmd.find("{ranks}")) != std::string::npos;) cmd.replace(p, 7, std::to_string(ranks));
  for (const auto& a : args) cmd += (cmd.empty() ? "" : " ") + shell_quote(a);
  return cmd;
}

std::string trial_command(const ProbeOptions& o, int mbs) {
  std::vector<std::string> args{o.pipebench, "run", o.job_path, "--run", o.run_name};
  for (const auto& s : o.overrides) args.insert(args.end(), {"--set", s});
  args.insert(args.end(), {"--set", fmt::format("run.{}.micro_batch_size={}", o.run_name, mbs), "--set", "train.warmup=0",
                           "--set", fmt::format("train.repeats={}", o.steps), "-o", o.trial_dir, "--label",
                           fmt::format("probe-mbs{}", mbs), "--probe-trial"});
  return launch_command(o.launcher, o.ranks, args);
}

ProcessResult run_process(const std::string& command, double timeout_s, const std::function<void(double)>& tick,
                          double tick_every_s, const std::string& what) {
  char path[] = "/tmp/pipebench-trial-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) throw Error("probe: cannot create a temporary file for the trial output");
  ProcessResult r;
  const double start = now_s();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    throw Error("probe: fork failed");
  }
  if (pid == 0) {
    setpgid(0, 0);  // own group: a timeout kills the launcher and everything it started
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  StopSignals handlers;
  int status = 0;
  double next_tick = tick_every_s;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (g_stop_signal != 0) {
      const int sig = g_stop_signal;
      fmt::print(stderr, "\npipebench: {}: stopping the running {} (process group {})\n", signal_name(sig), what, pid);
      stop_group(pid, status, 5.0);
      close(fd);
      unlink(path);
      handlers.restore();
      std::signal(sig, SIG_DFL);
      raise(sig);  // ends this process as the signal would have
    }
    if (tick && now_s() - start >= next_tick) {
      tick(now_s() - start);
      next_tick += tick_every_s;
    }
    if (now_s() - start > timeout_s) {
      r.timed_out = true;
      stop_group(pid, status, 5.0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  handlers.restore();
  r.seconds = now_s() - start;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  close(fd);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  unlink(path);
  return r;
}

namespace {

// One trial: the command, its outcome, and the peak memory per rank from the
// trial's results file when `pipebench run` wrote one.
ProbeTrial run_trial(const ProbeOptions& options, int mbs, const std::function<void(double)>& tick, double every_s) {
  ProbeTrial t;
  t.micro_batch_size = mbs;
  t.command = trial_command(options, mbs);
  const ProcessResult p = run_process(t.command, options.trial_timeout_s, tick, every_s);
  t.exit_code = p.exit_code;
  t.seconds = p.seconds;
  t.outcome = classify_trial(p.exit_code, p.timed_out, p.output);
  t.output_tail = tail_lines(p.output, 12);
  const auto at = p.output.rfind("results: ");
  if (at != std::string::npos) {
    const auto eol = p.output.find('\n', at);
    t.results_path = p.output.substr(at + 9, eol == std::string::npos ? std::string::npos : eol - at - 9);
    try {
      const JobResult jr = read_results(t.results_path);
      if (!jr.runs.empty()) t.peak_mem_bytes = jr.runs.front().peak_mem_bytes;
    } catch (const std::exception&) {
      t.results_path.clear();
    }
  }
  return t;
}

bool fits(TrialOutcome o) { return o == TrialOutcome::ok || o == TrialOutcome::nan; }

// The search's state: the trials so far and the bracket [lo, hi).
class Search {
 public:
  Search(const ProbeOptions& o, const ProbeObserver& observer) : o_(o), observer_(observer), lo_(o.lo), hi_(o.hi) {
    res_.options = o;
  }

  ProbeResult run() {
    if (o_.predicted > 0)
      if (auto done = from_prediction()) return *done;
    if (!lo_known_)
      if (auto done = check_lo()) return *done;
    return bisect();
  }

 private:
  const ProbeTrial& trial(int mbs) {
    ProbeProgress p;
    p.micro_batch_size = mbs;
    p.trial = static_cast<int>(res_.trials.size()) + 1;
    p.expected = static_cast<int>(res_.trials.size()) + still_needed();
    double spent = 0.0;
    for (const auto& t : res_.trials) spent += t.seconds;
    // The trials left, this one included, at the mean trial time so far.
    const double search_left =
        res_.trials.empty() ? -1.0 : spent / static_cast<double>(res_.trials.size()) * (p.expected - p.trial + 1);
    p.eta_s = search_left;
    if (observer_.on_start) observer_.on_start(p);
    auto tick = [&](double elapsed) {
      p.elapsed_s = elapsed;
      p.eta_s = search_left < 0 ? -1.0 : std::max(0.0, search_left - elapsed);
      if (observer_.on_tick) observer_.on_tick(p);
    };
    res_.trials.push_back(run_trial(o_, mbs, observer_.on_tick ? std::function<void(double)>(tick) : nullptr,
                                    observer_.every_s));
    if (observer_.on_trial) observer_.on_trial(res_.trials.back());
    return res_.trials.back();
  }

  // The most trials the search may still need, this one included: the
  // prediction's two, lo, the bisection of [lo, hi), and hi itself.
  int still_needed() const {
    int n = 0;
    if (o_.predicted > 0 && res_.trials.size() < 2) n += 2 - static_cast<int>(res_.trials.size());
    for (int w = hi_ - lo_; w > 1; w = (w + 1) / 2) ++n;
    return std::max(1, n + (lo_known_ || !res_.trials.empty() ? 0 : 1) + (hi_failed_ ? 0 : 1));
  }

  ProbeResult finish(int max, std::string reason) {
    res_.max_micro_batch = max;
    res_.recommended_micro_batch = recommended_micro_batch(max);
    res_.stop_reason = std::move(reason);
    return res_;
  }

  // A timeout or a plain error ends the search at `fallback`.
  std::optional<ProbeResult> stop_on(const ProbeTrial& t, int fallback) {
    if (t.outcome == TrialOutcome::timeout)
      return finish(fallback, fmt::format("trial at {} timed out after {:.0f} s", t.micro_batch_size, o_.trial_timeout_s));
    if (t.outcome == TrialOutcome::error)
      return finish(fallback, fmt::format("trial at {} failed without an out-of-memory signature (exit {})",
                                          t.micro_batch_size, t.exit_code));
    return std::nullopt;
  }

  // The planner's prediction and the size above it: two trials when they
  // agree; otherwise the bracket on the side they point to.
  std::optional<ProbeResult> from_prediction() {
    const int pred = o_.predicted;
    const ProbeTrial& at = trial(pred);
    if (auto stop = stop_on(at, 0)) return stop;
    if (fits(at.outcome)) {
      const ProbeTrial& above = trial(pred + 1);
      if (auto stop = stop_on(above, pred)) return stop;
      if (above.outcome == TrialOutcome::oom)
        return finish(pred, fmt::format("confirmed the planner's prediction: {} fits, {} does not", pred, pred + 1));
      lo_ = pred + 1;  // higher than predicted: bisect above
      hi_ = std::max(hi_, lo_ + 1);
      lo_known_ = true;
      previous_ = above.outcome;
      return std::nullopt;
    }
    if (pred <= lo_) return finish(0, fmt::format("micro_batch_size {} (lo) does not fit", pred));
    hi_ = pred;  // lower than predicted: bisect below
    hi_failed_ = true;
    previous_ = at.outcome;
    return std::nullopt;
  }

  std::optional<ProbeResult> check_lo() {
    const ProbeTrial& first = trial(lo_);
    if (first.outcome == TrialOutcome::oom) return finish(0, fmt::format("micro_batch_size {} (lo) does not fit", lo_));
    if (first.outcome == TrialOutcome::error)
      return finish(0, fmt::format("micro_batch_size {} (lo) failed without an out-of-memory signature (exit {}): fix the "
                                   "run first",
                                   lo_, first.exit_code));
    if (first.outcome == TrialOutcome::timeout)
      return finish(0, fmt::format("micro_batch_size {} (lo) timed out after {:.0f} s", lo_, o_.trial_timeout_s));
    previous_ = first.outcome;
    return std::nullopt;
  }

  ProbeResult bisect() {
    while (lo_ + 1 < hi_) {
      const int mid = lo_ + (hi_ - lo_) / 2;
      const ProbeTrial& t = trial(mid);
      const bool failure = t.outcome != TrialOutcome::ok;
      const bool prev_failure = previous_ != TrialOutcome::ok;
      if (failure && prev_failure && ((t.outcome == TrialOutcome::oom) != (previous_ == TrialOutcome::oom)))
        return finish(lo_, fmt::format("two consecutive failures mixing out-of-memory and other failures ({} then {} at {})",
                                       to_string(previous_), to_string(t.outcome), mid));
      if (auto stop = stop_on(t, lo_)) return *stop;
      if (fits(t.outcome)) {
        lo_ = mid;
      } else {
        hi_ = mid;
        hi_failed_ = true;
      }
      previous_ = t.outcome;
    }
    if (!hi_failed_) {
      // Every trial fitted: the limit may be hi itself or above.
      const ProbeTrial& t = trial(hi_);
      if (fits(t.outcome)) return finish(hi_, fmt::format("hi = {} fits: the limit is at least {}; raise --hi", hi_, hi_));
      if (t.outcome != TrialOutcome::oom)
        return finish(lo_, fmt::format("trial at hi = {} failed without an out-of-memory signature ({})", hi_,
                                       to_string(t.outcome)));
    }
    return finish(lo_, fmt::format("converged: {} fits, {} does not", lo_, lo_ + 1));
  }

  const ProbeOptions& o_;
  const ProbeObserver& observer_;
  ProbeResult res_;
  int lo_, hi_;
  bool hi_failed_ = false, lo_known_ = false;
  TrialOutcome previous_ = TrialOutcome::ok;
};

}  // namespace

ProbeResult run_probe(const ProbeOptions& options, const ProbeObserver& observer) {
  if (options.lo < 1 || options.hi <= options.lo)
    throw ConfigError(fmt::format("probe: need 1 <= lo < hi (got lo = {}, hi = {})", options.lo, options.hi));
  if (!(options.trial_timeout_s > 0.0) || !std::isfinite(options.trial_timeout_s))
    throw ConfigError(fmt::format("probe: --trial-timeout must be a positive number of seconds (got {})",
                                  options.trial_timeout_s));
  return Search(options, observer).run();
}

}  // namespace pipebench
