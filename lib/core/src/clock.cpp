#include "pipebench/core/clock.hpp"

#include <cerrno>
#include <cmath>
#include <ctime>

#include <sys/prctl.h>

namespace pipebench {

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void sleep_until_s(double deadline_s) {
  if (!(deadline_s > now_s())) return;  // already due: no syscall, no wake-up latency
  timespec ts{};
  const double whole = std::floor(deadline_s);
  ts.tv_sec = static_cast<time_t>(whole);
  ts.tv_nsec = static_cast<long>((deadline_s - whole) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1000000000L;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

void tighten_timer_slack() { prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); }

}  // namespace pipebench
