// Makes a nightly history for bench/whole/history_index.sh: N results files
// from one real TEMPLATE file, night i created FIRST + i days after
// 2025-01-01 00:00:00 UTC, its step times scaled by a deterministic factor
// within ±1% (so every night is its own measurement), everything else as
// recorded (events included: the files are as large as the template).
//   build/bench/history_files TEMPLATE.h5 DIR N [FIRST]
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>

#include "pipebench/results/results.hpp"

int main(int argc, char** argv) {
  using namespace pipebench;
  if (argc < 4 || std::atoi(argv[3]) < 1) {
    std::fprintf(stderr, "usage: history_files TEMPLATE.h5 DIR N [FIRST]\n");
    return 2;
  }
  const JobResult original = read_results(argv[1], ReadEvents::keep);
  const std::filesystem::path dir = argv[2];
  const int n = std::atoi(argv[3]);
  const int first = argc > 4 ? std::atoi(argv[4]) : 0;
  std::filesystem::create_directories(dir);
  const std::time_t base = 1735689600;  // 2025-01-01T00:00:00Z
  for (int i = first; i < first + n; ++i) {
    JobResult night = original;
    const std::time_t t = base + static_cast<std::time_t>(i) * 86400;
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    night.root_attrs["created_utc"] = stamp;
    // A Weyl sequence in [-1%, +1%): the same nights on every machine.
    const double factor = 1.0 + 0.02 * (static_cast<double>((static_cast<unsigned>(i) * 2654435761u) % 1000u) / 1000.0 - 0.5);
    for (auto& r : night.runs)
      for (auto& s : r.step_time_s) s *= factor;
    char name[32];
    std::snprintf(name, sizeof name, "night-%05d.h5", i);
    write_results((dir / name).string(), night);
  }
  return 0;
}
