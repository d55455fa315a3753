// The machine's floor for the executor's overhead per action: N processes
// pass one token around a ring through shared memory, each waiting for it as
// pipebench's ranks wait for a boundary message when ranks outnumber cores
// (poll, then sched_yield). Nothing else runs, no MPI: what a hand-off
// between processes costs on this machine (a context switch where processes
// share a core), the reference bench/whole/sim_bubble.sh divides by.
//
// Usage: handoff_floor NPROCS [HOPS] [--pin]   prints "handoff_floor: N processes, X us per hop"
//   --pin: process r runs on CPU r mod (CPUs), as `mpirun --map-by core --bind-to core` places ranks.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {
struct alignas(64) Slot {
  std::atomic<long> tokens{0};  // how many times the token reached this process
};

// Process r: waits for its k-th token (k = 1, 2, ...), passes it on.
void run_process(Slot* slots, int n, int r, long hops) {
  long seen = 0;
  for (long hop = r; hop < hops; hop += n) {
    if (hop > 0) {
      ++seen;
      while (slots[r].tokens.load(std::memory_order_acquire) < seen) sched_yield();
    }
    slots[(r + 1) % n].tokens.fetch_add(1, std::memory_order_release);
  }
}

// Pins the calling process to the r-th CPU it may run on (modulo their number).
bool pin(int r) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  const int cpus = CPU_COUNT(&allowed);
  for (int cpu = 0, k = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (k++ != r % cpus) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  bool pinned = false;
  int positional = 0;
  const char* args[2] = {nullptr, nullptr};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--pin") == 0) pinned = true;
    else if (positional < 2) args[positional++] = argv[i];
  }
  const int n = args[0] ? std::atoi(args[0]) : 0;
  const long hops = args[1] ? std::atol(args[1]) : 200000;
  if (n < 2 || hops < n) {
    std::fprintf(stderr, "usage: handoff_floor NPROCS(>=2) [HOPS] [--pin]\n");
    return 2;
  }
  void* shared = mmap(nullptr, sizeof(Slot) * static_cast<std::size_t>(n), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    std::perror("handoff_floor: mmap");
    return 1;
  }
  auto* slots = static_cast<Slot*>(shared);
  for (int r = 0; r < n; ++r) new (&slots[r]) Slot();
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("handoff_floor: fork");
      return 1;
    }
    if (pid == 0) {
      if (pinned && !pin(r)) {
        std::perror("handoff_floor: sched_setaffinity");
        _exit(1);
      }
      run_process(slots, n, r, hops);
      _exit(0);
    }
  }
  int failed = 0;
  for (int r = 0; r < n; ++r) {
    int status = 0;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (failed) return 1;
  std::printf("handoff_floor: %d processes%s, %.2f us per hop\n", n, pinned ? " (pinned)" : "", us / static_cast<double>(hops));
  return 0;
}
