// The history index (docs/reports.md, "History index"): an SQLite file beside
// the results that keeps, per results file read once, its identity and what
// the trends read of it (FileDigest), so that a nightly report parses only the
// files that are new or changed since.
//
// A cache, never a source: a row is used only while its file is the file it
// was made from — the same size, mtime, ctime and inode, or, when any of
// those moved but the size did not (a copy, a touch), the same sha256 — and a
// damaged or vanished file is read (and skipped) as without the index.
// Whatever goes wrong with the index itself (missing, unreadable, damaged,
// read-only, locked past the busy timeout, written by another pipebench or
// for another folder) is a note, never an error: the report reads the files
// instead, and rebuilds the index where it may. The verdicts are the same,
// bit for bit, with and without it.
//
// Concurrency: WAL journal and a busy timeout, so that two reports on one
// index both finish; each writes its new rows in one transaction at save().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "pipebench/report/report.hpp"

namespace pipebench {

inline constexpr const char* kIndexFileName = ".pipebench-index.sqlite";
// The index a results folder keeps by default: DIR/.pipebench-index.sqlite.
std::string default_index_path(const std::string& dir);
// The layout of the tables and what a digest holds: an index with another
// version is rebuilt (bump it with any change to FileDigest or digest_of).
inline constexpr int kIndexSchemaVersion = 1;

// What says a file is still the file a row was made from.
struct FileStamp {
  std::uint64_t size = 0, inode = 0;
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};
std::optional<FileStamp> stamp_of(const std::string& path);

class HistoryIndex {
 public:
  // Opens `path` (created when missing; its name must end in ".sqlite") for
  // the pipebench `writer` (its git sha). An index of another schema or
  // writer, or made for another folder (copied from elsewhere), is emptied; a
  // damaged one is replaced; one that cannot be opened for writing is read
  // only; one that cannot be opened at all is left aside (usable() false).
  // Each of these leaves a line in notes().
  HistoryIndex(const std::string& path, const std::string& writer);
  ~HistoryIndex();
  HistoryIndex(const HistoryIndex&) = delete;
  HistoryIndex& operator=(const HistoryIndex&) = delete;

  bool usable() const;
  const std::string& path() const { return path_; }
  // The digest recorded for the file at `path` when it is still that file
  // (see above); its path is `path`. nullopt: read the file.
  std::optional<FileDigest> find(const std::string& path);
  // A file with a row was read whole and cleanly by this pipebench: while it
  // is still that file its stamp now and the sha256 of its bytes, so that a
  // reader that needs the whole file (compare, a report's RESULTS) may read
  // it without the isolated pre-read and without hashing it again. nullopt:
  // unknown or changed since.
  struct Known {
    FileStamp stamp;
    std::string sha256;
  };
  std::optional<Known> known(const std::string& path);
  // Records `digest` of the file at `path` as `stamp` (taken before it was
  // read; the caller checks the file did not change meanwhile) and `sha256`
  // (of the bytes read). Kept in memory until save().
  void add(const std::string& path, const FileStamp& stamp, const std::string& sha256, const std::string& results_id,
           const FileDigest& digest);
  // Writes what add() kept and forgets the rows of files that are gone or
  // were not what their row said, in one transaction; a note when it cannot
  // (read-only, busy past the timeout).
  void save();
  // Every row's path, for `index rebuild` and the tests.
  std::vector<std::string> paths();
  const std::vector<std::string>& notes() const { return notes_; }

  struct Db;  // the SQLite connection (history_index.cpp)

 private:
  struct Pending;
  // The row of `path` while it is still that file (its stamp, or else its
  // bytes; a changed file's row is marked stale), with `columns` of `files`
  // after the stamp and the sha256 in `row`.
  struct Match;
  std::optional<Match> match(const std::string& path, const std::string& columns);
  void open_or_rebuild(const std::string& writer, bool may_replace);
  void note(std::string line) { notes_.push_back(std::move(line)); }
  std::string path_;
  std::unique_ptr<Db> db_;
  bool read_only_ = false;
  std::vector<Pending> pending_;
  std::set<std::string> stale_;  // rows found not to match their file
  std::vector<std::string> notes_;
};

// `pipebench index rebuild DIR`: a fresh index of every results file under
// DIR (at `index_path`, default DIR/.pipebench-index.sqlite); unreadable files
// are listed in `skipped`. Returns the number of files indexed.
std::size_t rebuild_history_index(const std::string& dir, const std::string& index_path, const std::string& writer,
                                  std::vector<SkippedFile>& skipped, std::vector<std::string>& notes);

}  // namespace pipebench
