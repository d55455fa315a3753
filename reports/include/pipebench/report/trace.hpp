// Timelines for Perfetto and chrome://tracing (`pipebench trace`,
// docs/trace.md): a results file's measured events in the Trace Event Format
// (JSON), one process per rank and run, and the run's schedule simulated
// with its measured per-action medians as a second process group beside it.
#pragma once

#include <cstdio>
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

// Throws Error when `options` name a run or a step `result` does not have.
void check_trace_options(const JobResult& result, const TraceOptions& options);

// Writes the trace of the results file at `path` to `sink` as it is
// produced ({"traceEvents": [...], "displayTimeUnit": "ms", "otherData":
// {...}} and a newline). `result` is that file as read_results read it
// (ReadEvents::skip will do): each run's events are streamed from the file
// again, whole (step, rank) groups at a time, so memory holds a block of
// events whatever the run's size. `job` is the file's recorded workload
// (nullptr: no simulated timeline). Throws as check_trace_options (before
// writing anything), Error when a write fails, ResultsError when the file
// cannot be read again.
void write_trace_json(const std::string& path, const JobResult& result, const Job* job, const TraceOptions& options,
                      std::FILE* sink);

}  // namespace pipebench
