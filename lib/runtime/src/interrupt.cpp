#include "pipebench/runtime/interrupt.hpp"

#include <csignal>
#include <cstring>
#include <unistd.h>

#include "pipebench/core/error.hpp"
#include "pipebench/core/posix.hpp"
#include "pipebench/results/results.hpp"

namespace pipebench {

namespace {

constexpr std::size_t kPathMax = 4096;
char g_partial[kPathMax];
char g_final[kPathMax];
char g_claim[kPathMax];
volatile std::sig_atomic_t g_armed = 0;

void say(const char* s) {
  const ssize_t n = write(STDERR_FILENO, s, std::strlen(s));
  (void)n;
}

void on_signal(int sig) {
  publish_results_now(signal_name(sig));
  std::signal(sig, SIG_DFL);
  raise(sig);
}

bool copy_path(char* dst, const std::string& src) {
  if (src.size() + 1 > kPathMax) return false;
  std::memcpy(dst, src.c_str(), src.size() + 1);
  return true;
}

}  // namespace

void publish_results_on_signal(const std::string& partial, const std::string& final_path, const std::string& claim) {
  static bool installed = false;
  g_armed = 0;
  if (!copy_path(g_partial, partial) || !copy_path(g_final, final_path) || !copy_path(g_claim, claim))
    throw ResultsError("results path longer than " + std::to_string(kPathMax - 1) + " bytes: " + final_path);
  if (!installed) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&sa.sa_mask, sig);  // one handler at a time
    for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
    installed = true;
  }
  g_armed = 1;
}

void stop_publishing_on_signal() { g_armed = 0; }

void publish_results_now(const char* why) noexcept {
  say("\npipebench: ");
  say(why);
  if (g_armed) {
    g_armed = 0;
    if (publish_partial(g_partial, g_final)) {
      say(": launch interrupted; completed runs kept in ");
      say(g_final);
    } else {
      say(": launch interrupted; the last checkpoint is ");
      say(g_partial);
    }
    unlink(g_claim);  // the name is held by the file (or its checkpoint) now
  } else {
    say(": launch interrupted");
  }
  say("\n");
}

}  // namespace pipebench
