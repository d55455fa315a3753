// HDF5 results, schema 1 (SPEC §7, docs/results-format.md): one file per
// `pipebench run`, written by rank 0, atomically (temporary name, then a
// hard link to the final name, which fails rather than overwrite), and the
// reader that reports and tests use.
#pragma once

#include <string>

#include "pipebench/core/error.hpp"  // ResultsError
#include "pipebench/results/records.hpp"

namespace pipebench {

inline constexpr int kResultsSchemaVersion = 1;

// results/<job>/[<label>/]<UTC yyyymmddThhmmssZ>-<id>.h5 under `base_dir`,
// where id is the Slurm job id when set, else the pid.
std::string default_results_path(const std::string& base_dir, const std::string& job_name, const std::string& label,
                                 const std::string& utc_stamp, const std::string& id);

// Writes `result` to `path` (creating parent folders). If `path` exists,
// "-1", "-2", ... is appended before ".h5"; returns the path written.
std::string write_results(const std::string& path, const JobResult& result);

// Reads a file written by write_results (any schema-1 file).
JobResult read_results(const std::string& path);

}  // namespace pipebench
