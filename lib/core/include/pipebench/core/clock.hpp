// Monotonic time in seconds and absolute-deadline sleeps. The sim backend
// sleeps until start + duration (not for duration), so scheduling delays do
// not accumulate, even with more ranks than cores.
#pragma once

namespace pipebench {

// Seconds on CLOCK_MONOTONIC.
double now_s();

// Sleeps until now_s() >= deadline_s (returns at once if already past).
void sleep_until_s(double deadline_s);

// Linux rounds sleeps up by the thread's timer slack (50 us by default),
// which would add ~50-90 us to every modelled action; this sets it to 1 ns
// for the calling thread (and threads it creates later).
void tighten_timer_slack();

// The clock one rank's run is timed on.
//  - wall: now_s(); sleep_until() sleeps. Every backend, and the sim backend
//    with device.sim_clock = "wall" (the modelled durations are slept, so the
//    run also measures the executor's and the transport's own overhead).
//  - virtual: a number this rank advances — by the modelled durations and by
//    the modelled arrival of messages — without sleeping (the sim backend
//    with device.sim_clock = "virtual"). Timings are then the model's
//    exactly, whatever the machine's load or the number of ranks per core.
// The executor, the backend and the transport of a run share one RunClock.
class RunClock {
 public:
  static RunClock wall() { return RunClock(false); }
  static RunClock virtual_clock() { return RunClock(true); }

  bool is_virtual() const { return virtual_; }
  double now() const { return virtual_ ? t_ : now_s(); }
  // Until now() >= t: sleeps (wall) or moves the clock to t if later (virtual).
  void sleep_until(double t) {
    if (!virtual_) sleep_until_s(t);
    else if (t > t_) t_ = t;
  }

 private:
  explicit RunClock(bool is_virtual) : virtual_(is_virtual) {}
  bool virtual_ = false;
  double t_ = 0.0;
};

}  // namespace pipebench
