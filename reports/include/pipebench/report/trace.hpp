// Timelines for Perfetto and chrome://tracing (`pipebench trace`,
// docs/trace.md): a results file's measured events in the Trace Event Format
// (JSON), one process per rank and run, and the run's schedule simulated
// with its measured per-action medians as a second process group beside it.
#pragma once

#include <string>
#include <vector>

#include "pipebench/core/job.hpp"
#include "pipebench/results/records.hpp"

namespace pipebench {

struct TraceOptions {
  std::vector<std::string> runs;  // empty: every run with events
  int step = 0;                   // 1-based step to export; 0: every step, one after another
  bool simulated = true;          // add the simulated timeline (needs the file's workload)
};

// The trace as JSON text ({"traceEvents": [...], "displayTimeUnit": "ms",
// "otherData": {...}}). `job` is the file's recorded workload (nullptr: no
// simulated timeline). Throws Error for a run name or a step the file does
// not have.
std::string trace_event_json(const JobResult& result, const Job* job, const TraceOptions& options);

}  // namespace pipebench
