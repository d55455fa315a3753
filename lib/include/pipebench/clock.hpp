// Monotonic time in seconds and absolute-deadline sleeps. The sim backend
// sleeps until start + duration (not for duration), so scheduling delays do
// not accumulate, even with more ranks than cores.
#pragma once

namespace pipebench {

// Seconds on CLOCK_MONOTONIC.
double now_s();

// Sleeps until now_s() >= deadline_s (returns at once if already past).
void sleep_until_s(double deadline_s);

}  // namespace pipebench
