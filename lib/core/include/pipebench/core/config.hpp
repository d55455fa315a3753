// TOML workload files -> validated Job (SPEC §2, docs/workload-format.md).
//
// Contract: load_job either returns a Job that satisfies every rule below or
// throws ConfigError whose message starts with "<file>:<line>: <key>: " and
// says what was expected. Nothing is partially applied.
//  - unknown tables/keys, wrong types, non-positive sizes are errors;
//  - len(layers_per_stage) == pipeline_size, sum == model.layers, no stage
//    with 0 layers, pipeline_size <= model.layers;
//  - hidden % heads == 0 (gpt); known schedule, mode, remainder, dtype, ...;
//  - run names unique; a named baseline exists and has pipeline_size 1;
//    a baseline with a different global batch is a warning (Job::warnings).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "pipebench/core/job.hpp"

namespace pipebench {

// Reads `path`, applies `overrides` ("dotted.key=value"; a run's key is
// "run.NAME.key=value"), validates. Values are TOML literals; anything that
// does not parse as one is taken as a string (so --set run.x.schedule=gpipe works).
Job load_job(const std::string& path, const std::vector<std::string>& overrides = {});

// Whether `name` may name a job or a run: 1 to kMaxNameLength letters,
// digits, '_' or '-' (it becomes a folder and an HDF5 group name).
bool valid_name(std::string_view name);

// Same, from TOML text; `source_name` is used in error messages.
Job parse_job(const std::string& toml_text, const std::string& source_name,
              const std::vector<std::string>& overrides = {});

// Every value of a workload's TOML text as a dotted key: "model.hidden" ->
// "256", "device.backend" -> "\"cpu\"" (TOML spelling, arrays on one line);
// a [[run]] table's keys as "run.NAME.key". What `pipebench compare` diffs
// key by key. ConfigError when the text does not parse.
std::map<std::string, std::string> toml_keys(const std::string& toml_text, const std::string& source_name);

// The job's effective TOML (after --set) without its [[run]] tables, and
// with [job] holding only `name` and `description` as given: the start of a
// workload file that `pipebench tune` completes with runs of its own.
std::string job_toml_without_runs(const Job& job, const std::string& name, const std::string& description);

}  // namespace pipebench
