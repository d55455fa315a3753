// What a run measures, as data: the normalised effective configuration of
// one run and a stable fingerprint of it (docs/reports.md, "Series").
//
// Two runs with the same fingerprint measure the same thing, so their step
// times, memory and losses may be compared night to night; a run whose
// fingerprint changed starts a new trend series. The configuration is the
// validated Job (defaults filled in, --set applied), not the TOML text, so a
// default written out or left implicit gives the same fingerprint.
//
// Included: every [model] key (llama's kv_heads, rope_theta, norm_eps and
// tie_embeddings only for kind = "llama"; its ffn_hidden as computed); [train] optimizer, learning_rate, grad_clip;
// every [device] key (transport resolved); the run's pipeline_size,
// micro_batch_size, num_microbatches, mode, schedule (inference runs: none),
// virtual_stages_per_rank (when not 1), recompute (when not none), a hash of
// a file schedule's CSV text,
// layers_per_stage (or remainder and balance_by when it is computed).
// Excluded, because they do not change what one step measures: names,
// descriptions, labels, baseline, layers_per_stage_origin (printing only),
// warmup and repeats (how many steps, not what a step is) and step_timeout_s.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "pipebench/core/job.hpp"

namespace pipebench {

// "model.hidden" -> "256", ..., "run.micro_batch_size" -> "2"; values in a
// canonical spelling (integers in decimal, floats with 17 significant
// digits, enums by their TOML name, arrays as "[1, 2]").
using WorkloadKeys = std::map<std::string, std::string>;
WorkloadKeys workload_keys(const Job& job, const RunSpec& run);

// The keys as text, one "key = value" line each, in key order: what the
// fingerprint hashes and what a results file stores beside it.
std::string workload_text(const WorkloadKeys& keys);
WorkloadKeys parse_workload_text(const std::string& text);

// 16 hex digits: the FNV-1a 64 hash of `text` (stable across platforms and
// releases: fingerprints and identities stored in results files use it).
std::string fnv1a64(std::string_view text);

// 16 hex digits: FNV-1a 64 of workload_text(keys).
std::string workload_fingerprint(const WorkloadKeys& keys);

// "micro_batch_size 2 → 4, model.hidden 256 → 512": what differs between two
// configurations (keys present in only one show "(none)").
std::string describe_changes(const WorkloadKeys& before, const WorkloadKeys& after);

}  // namespace pipebench
