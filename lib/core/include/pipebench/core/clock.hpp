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

}  // namespace pipebench
