// HDF5 results, schema 1 (SPEC §7, docs/results-format.md): one file per
// `pipebench run`, written by rank 0 run by run (ResultsWriter), published
// atomically (a hard link to the final name, which fails rather than
// overwrite), and the reader that reports and tests use.
#pragma once

#include <cstddef>
#include <memory>
#include <functional>
#include <string>

#include "pipebench/core/error.hpp"  // ResultsError
#include "pipebench/results/records.hpp"

namespace pipebench {

inline constexpr int kResultsSchemaVersion = 1;

class EventStore;  // results_write.cpp: a ResultsWriter's scratch file of streamed events

// results/<job>/[<label>/]<UTC yyyymmddThhmmssZ>-<id>.h5 under `base_dir`,
// where id is the Slurm job id when set, else the pid.
std::string default_results_path(const std::string& base_dir, const std::string& job_name, const std::string& label,
                                 const std::string& utc_stamp, const std::string& id);

// A results file kept durable while a job runs (docs/results-format.md,
// "Durability"). Until finish() the file lives as FINAL.partial, which is at
// every moment a complete, valid results file: checkpoint() writes the whole
// JobResult so far to FINAL.partial.tmp, flushes and fsyncs it, and renames
// it over FINAL.partial (atomic), so a kill at any instant leaves the
// previous checkpoint or the new one, never a torn file. finish() writes the
// last version and publishes it as FINAL (or FINAL-1.h5, ...: an existing
// file is never replaced) and removes FINAL.partial.
//
// An interrupted launch publishes FINAL.partial as FINAL with
// publish_partial() (async-signal-safe: link and unlink only); one killed
// outright leaves FINAL.partial, which `pipebench report` reads as it is.
class ResultsWriter {
 public:
  // Creates the folders, claims a final name no other writer holds
  // (`requested_path`, else NAME-1.h5, NAME-2.h5, ...: NAME.h5.claim created
  // exclusively, removed by the destructor) and proves the folder writable by
  // creating its FINAL.partial.tmp; ResultsError naming the path and the OS
  // reason. Two launches asking for one name (one Slurm job id, one second)
  // get two names, and their checkpoints never meet.
  explicit ResultsWriter(const std::string& requested_path);
  ResultsWriter(const ResultsWriter&) = delete;
  ResultsWriter& operator=(const ResultsWriter&) = delete;
  ~ResultsWriter();

  // A run's events as they arrive, so that rank 0 need not hold them: kept
  // in a scratch HDF5 file beside the results, stored as the results file
  // stores events (chunked, compressed), in the order appended. The scratch
  // file is unlinked as soon as it is created: a kill leaves nothing behind.
  // After end_events(run), every checkpoint and finish copy them into
  // /runs/<run>/events of the result's run of that name (whose `events` must
  // then be empty). ResultsError when the scratch file cannot be written.
  void append_events(const std::string& run, const EventRecord* events, std::size_t n);
  void end_events(const std::string& run);

  void checkpoint(const JobResult& result);
  // Returns the path published.
  std::string finish(const JobResult& result);
  // After a write of this launch failed (`why`: the ResultsError with the OS
  // reason, from a checkpoint or the events scratch file; the runner calls
  // it): frees what the writer holds and marks the checkpoint's interrupted
  // runs as `error` with that reason (mark_unwritten_runs): they were
  // measured, or were being measured, and only their record was lost. The
  // events streamed so far are dropped. Returns whether a run was marked.
  bool record_write_failure(const std::string& why) noexcept;

  const std::string& final_path() const { return final_; }
  const std::string& partial_path() const { return partial_; }
  const std::string& claim_path() const { return claim_; }

 private:
  EventStore& event_store();  // created on first use

  std::string final_, claim_, partial_, tmp_, events_path_;
  bool finished_ = false;
  std::unique_ptr<EventStore> events_;
};

// In the checkpoint file `checkpoint`, every run recorded as interrupted
// becomes failed with kind `error`, decision inconclusive, and a message
// saying its results could not be written and `why`, in place (attributes
// rewritten; nothing else of the file changes). False when nothing was marked
// (no checkpoint, no such run, or the file itself cannot be changed).
bool mark_unwritten_runs(const std::string& checkpoint, const std::string& why) noexcept;

// Publishes `partial` as `final` (link, then unlink `partial`); false when it
// cannot (no checkpoint yet, `final` exists). Async-signal-safe.
bool publish_partial(const char* partial, const char* final_path) noexcept;

// The HDF5 library's version ("1.10.8").
std::string hdf5_version();

// Writes `result` to `path` in one go (ResultsWriter without checkpoints).
// If `path` exists, "-1", "-2", ... is appended before ".h5"; returns the
// path written.
std::string write_results(const std::string& path, const JobResult& result);

// Reads a file written by write_results (any schema-1 file). Every event is
// checked either way; `skip` leaves the runs' `events` empty (a reader that
// needs none of them: trends over many files).
enum class ReadEvents { keep, skip };
JobResult read_results(const std::string& path, ReadEvents events = ReadEvents::keep);

// Streams the events of `run` (as read_results returned it: its counts bound
// them) from the results file at `path`, checked as read_results checks them,
// in the file's order, to `take` in pieces of whole (step, rank) groups —
// EventDigest::add's contract — so a reader holds one block (65 536 events)
// and one group, whatever the run's size. ResultsError as read_results.
void stream_events(const std::string& path, const RunResult& run,
                   const std::function<void(const EventRecord*, std::size_t)>& take);

}  // namespace pipebench
