// The history index (history_index.hpp): SQLite, three tables —
//   meta(key, value)        schema_version, writer, folder
//   files(path, ...)        one row per results file: its stamp, sha256,
//                           results_id and the digest's file-wide fields
//   runs(path, idx, ...)    one row per trended run of it: series key, point
// Scalars are REAL (NaN stored as NULL), per-step and per-rank figures BLOBs
// of their native 8-byte values, so a digest comes back bit for bit.
#include "pipebench/report/history_index.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <sqlite3.h>

#include "pipebench/core/sha256.hpp"

namespace pipebench {

namespace {

constexpr int kBusyTimeoutMs = 30000;  // a concurrent report's transaction: seconds at most

const char* const kSchema = R"(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(
  path TEXT PRIMARY KEY, size INTEGER NOT NULL, inode INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
  ctime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL, results_id TEXT NOT NULL, role TEXT NOT NULL, job TEXT NOT NULL,
  fingerprint TEXT NOT NULL, created_utc TEXT NOT NULL, git_sha TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  path TEXT NOT NULL, idx INTEGER NOT NULL, run TEXT NOT NULL, workload TEXT NOT NULL,
  workload_fingerprint TEXT NOT NULL, identity TEXT NOT NULL, step_time_median_s REAL, bubble_measured REAL,
  peak_mem_bytes REAL, throughput REAL, slowest_stage_s REAL, peak_mem_per_rank BLOB NOT NULL,
  counted_step_times BLOB NOT NULL, loss BLOB NOT NULL, PRIMARY KEY(path, idx));
)";

// The folder an index belongs to: its own, links resolved (a folder reached
// by another spelling is the same folder; a copy elsewhere is not).
std::string folder_of(const std::string& index_path) {
  std::error_code ec;
  const auto folder = std::filesystem::absolute(index_path).lexically_normal().parent_path();
  const auto canonical = std::filesystem::weakly_canonical(folder, ec);
  return (ec ? folder : canonical).string();
}

// The key of a results file: its absolute, lexically normal path.
std::string key_of(const std::string& path) { return std::filesystem::absolute(path).lexically_normal().string(); }

template <typename T>
std::string blob_of(const std::vector<T>& v) {
  std::string b(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <typename T>
std::vector<T> vector_of(const void* data, int bytes) {
  std::vector<T> v(static_cast<std::size_t>(bytes) / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), data, v.size() * sizeof(T));
  return v;
}

}  // namespace

std::string default_index_path(const std::string& dir) { return (std::filesystem::path(dir) / kIndexFileName).string(); }

std::optional<FileStamp> stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  FileStamp s;
  s.size = static_cast<std::uint64_t>(st.st_size);
  s.inode = static_cast<std::uint64_t>(st.st_ino);
  s.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return s;
}

// Named (not anonymous): HistoryIndex::Match holds a Statement, and a type
// with external linkage may not hold one from an anonymous namespace.
namespace index_sql {

// The connection and the few statements it runs; every failure an
// IndexError with SQLite's message.
struct IndexError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK) throw IndexError(sqlite3_errmsg(db));
  }
  ~Statement() { sqlite3_finalize(st_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& text(int i, const std::string& s) {
    check(sqlite3_bind_text(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Statement& blob(int i, const std::string& b) {
    check(sqlite3_bind_blob(st_, i, b.data(), static_cast<int>(b.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Statement& integer(int i, std::int64_t v) {
    check(sqlite3_bind_int64(st_, i, v));
    return *this;
  }
  Statement& real(int i, double v) {  // NaN as NULL (SQLite has no NaN)
    check(std::isnan(v) ? sqlite3_bind_null(st_, i) : sqlite3_bind_double(st_, i, v));
    return *this;
  }
  // true: a row is there to read; false: done.
  bool step() {
    const int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) throw IndexError(sqlite3_errmsg(db_));
    return false;
  }
  void run() {
    step();
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  void reset() { sqlite3_reset(st_); }
  std::string text(int col) const {
    const auto* p = sqlite3_column_text(st_, col);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(st_, col))) : "";
  }
  std::int64_t integer(int col) const { return sqlite3_column_int64(st_, col); }
  double real(int col) const {
    return sqlite3_column_type(st_, col) == SQLITE_NULL ? std::numeric_limits<double>::quiet_NaN()
                                                        : sqlite3_column_double(st_, col);
  }
  template <typename T>
  std::vector<T> values(int col) const {
    const void* p = sqlite3_column_blob(st_, col);
    return vector_of<T>(p, sqlite3_column_bytes(st_, col));
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) throw IndexError(sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

}  // namespace index_sql
using namespace index_sql;

struct HistoryIndex::Db {
  sqlite3* db = nullptr;
  ~Db() { sqlite3_close_v2(db); }
  void exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string why = err ? err : sqlite3_errmsg(db);
      sqlite3_free(err);
      throw IndexError(why);
    }
  }
  std::string meta(const char* key) {
    Statement q(db, "SELECT value FROM meta WHERE key = ?");
    q.text(1, key);
    return q.step() ? q.text(0) : "";
  }
};

struct HistoryIndex::Pending {
  std::string key;
  FileStamp stamp;
  bool stamp_only = false;  // the same bytes under a new stamp: only the stamp is rewritten
  std::string sha256, results_id;
  FileDigest digest;
};

namespace {

// Opens `path` with `flags`; null (and `why`) when it cannot.
std::unique_ptr<HistoryIndex::Db> open_db(const std::string& path, int flags, std::string& why);

}  // namespace

HistoryIndex::HistoryIndex(const std::string& path, const std::string& writer) : path_(path) {
  try {
    open_or_rebuild(writer, true);
  } catch (const IndexError& e) {
    note(fmt::format("history index {} left aside ({}): every history file read", path_, e.what()));
    db_.reset();
  }
}

HistoryIndex::~HistoryIndex() = default;

bool HistoryIndex::usable() const { return db_ != nullptr; }

namespace {

std::unique_ptr<HistoryIndex::Db> open_db(const std::string& path, int flags, std::string& why) {
  auto db = std::make_unique<HistoryIndex::Db>();
  if (sqlite3_open_v2(path.c_str(), &db->db, flags | SQLITE_OPEN_URI, nullptr) != SQLITE_OK) {
    why = db->db ? sqlite3_errmsg(db->db) : "out of memory";
    return nullptr;
  }
  sqlite3_busy_timeout(db->db, kBusyTimeoutMs);
  return db;
}

// The SQLite URI of `path` opened read-only and immutable (a read-only
// folder: no -wal or -shm file can be made beside it).
std::string immutable_uri(const std::string& path) {
  std::string uri = "file:";
  for (const char c : std::filesystem::absolute(path).string()) {
    if (c == '%' || c == '?' || c == '#') uri += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else uri += c;
  }
  return uri + "?mode=ro&immutable=1";
}

}  // namespace

void HistoryIndex::open_or_rebuild(const std::string& writer, bool may_replace) {
  if (!path_.ends_with(".sqlite")) throw IndexError("its name must end in .sqlite");
  const std::string folder = folder_of(path_);
  std::error_code ec;
  const bool exists = std::filesystem::exists(path_, ec);
  // A read-only folder (or file): an index that is there can still be read,
  // immutable (no -wal or -shm file can be made beside it); none is made.
  read_only_ = ::access(folder.c_str(), W_OK) != 0 || (exists && ::access(path_.c_str(), W_OK) != 0);
  if (read_only_ && !exists) throw IndexError(fmt::format("cannot create it: {}", std::strerror(errno)));
  std::string why;
  db_ = read_only_ ? open_db(immutable_uri(path_), SQLITE_OPEN_READONLY, why)
                   : open_db(path_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, why);
  if (!db_) throw IndexError(why);
  if (read_only_) note(fmt::format("history index {} is read-only: files not in it are read, not added", path_));
  const std::string version = std::to_string(kIndexSchemaVersion);
  try {
    Statement tables(db_->db, "SELECT count(*), count(CASE WHEN name = 'meta' THEN 1 END) FROM sqlite_master");
    tables.step();
    const bool empty = tables.integer(0) == 0, has_meta = tables.integer(1) > 0;
    tables.reset();
    // Somebody else's database given as --index: never touched.
    if (!empty && !has_meta) throw IndexError("an SQLite database that is not a pipebench history index: left as it is");
    std::string mismatch;
    if (!empty) {
      const std::string had_schema = db_->meta("schema_version");
      if (had_schema != version) mismatch = fmt::format("schema version {}, this pipebench reads {}", had_schema, version);
      else if (const std::string w = db_->meta("writer"); w != writer)
        mismatch = fmt::format("written by pipebench {}, this is {}", w, writer);
      else if (const std::string f = db_->meta("folder"); f != folder)
        mismatch = fmt::format("made for the folder {} (copied or moved here)", f);
    }
    if (!empty && mismatch.empty()) return;
    if (read_only_) throw IndexError(empty ? "empty" : mismatch);
    if (!mismatch.empty()) note(fmt::format("history index {} rebuilt: {}", path_, mismatch));
    db_->exec("PRAGMA journal_mode=WAL");
    db_->exec("BEGIN IMMEDIATE; DROP TABLE IF EXISTS runs; DROP TABLE IF EXISTS files; DROP TABLE IF EXISTS meta;");
    db_->exec(kSchema);
    Statement set(db_->db, "INSERT INTO meta(key, value) VALUES (?, ?)");
    set.text(1, "schema_version").text(2, version).run();
    set.text(1, "writer").text(2, writer).run();
    set.text(1, "folder").text(2, folder).run();
    db_->exec("COMMIT");
  } catch (const IndexError& e) {
    // Not a database, or a damaged one: replaced by an empty index (it is
    // only a cache; the name ends in .sqlite, so it was never a results file).
    const int code = db_ ? sqlite3_errcode(db_->db) : SQLITE_OK;
    if (read_only_ || !may_replace || (code != SQLITE_NOTADB && code != SQLITE_CORRUPT)) throw;
    db_.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((path_ + suffix).c_str());
    note(fmt::format("history index {} was damaged ({}): rebuilt", path_, e.what()));
    open_or_rebuild(writer, false);
  }
}

struct HistoryIndex::Match {
  std::string key;
  FileStamp stamp;  // now
  std::string sha256;
  std::unique_ptr<Statement> row;  // on the file's row
};

std::optional<HistoryIndex::Match> HistoryIndex::match(const std::string& path, const std::string& columns) {
  const std::string key = key_of(path);
  // Found not to match already (find, then the read's known): not hashed again.
  if (stale_.count(key)) return std::nullopt;
  const auto now = stamp_of(path);
  if (!now) return std::nullopt;
  const std::string sql =
      "SELECT size, inode, mtime_ns, ctime_ns, sha256" + (columns.empty() ? "" : ", " + columns) + " FROM files WHERE path = ?";
  auto q = std::make_unique<Statement>(db_->db, sql.c_str());
  q->text(1, key);
  if (!q->step()) return std::nullopt;
  FileStamp had;
  had.size = static_cast<std::uint64_t>(q->integer(0));
  had.inode = static_cast<std::uint64_t>(q->integer(1));
  had.mtime_ns = q->integer(2);
  had.ctime_ns = q->integer(3);
  if (!(had == *now)) {
    // Moved, copied or touched, or new content: the bytes decide.
    std::string why;
    if (had.size != now->size || sha256_file(path, &why) != q->text(4)) {
      stale_.insert(key);
      return std::nullopt;
    }
    pending_.push_back({key, *now, true, "", "", {}});
  }
  return Match{key, *now, q->text(4), std::move(q)};
}

std::optional<HistoryIndex::Known> HistoryIndex::known(const std::string& path) {
  if (!db_) return std::nullopt;
  try {
    if (auto m = match(path, "")) return Known{m->stamp, m->sha256};
  } catch (const IndexError& e) {
    note(fmt::format("history index {} could not be read ({}): every file read", path_, e.what()));
    db_.reset();
  }
  return std::nullopt;
}

std::optional<FileDigest> HistoryIndex::find(const std::string& path) {
  if (!db_) return std::nullopt;
  try {
    auto m = match(path, "role, job, fingerprint, created_utc, git_sha");
    if (!m) return std::nullopt;
    const std::string& key = m->key;
    Statement& q = *m->row;
    constexpr int kFirst = 5;  // after the stamp and the sha256
    FileDigest d;
    d.path = path;
    d.role = q.text(kFirst);
    d.job = q.text(kFirst + 1);
    d.fingerprint = q.text(kFirst + 2);
    d.created_utc = q.text(kFirst + 3);
    d.git_sha = q.text(kFirst + 4);
    Statement r(db_->db,
                "SELECT run, workload, workload_fingerprint, identity, step_time_median_s, bubble_measured, peak_mem_bytes, "
                "throughput, slowest_stage_s, peak_mem_per_rank, counted_step_times, loss FROM runs WHERE path = ? "
                "ORDER BY idx");
    r.text(1, key);
    while (r.step()) {
      TrendRun tr;
      tr.run = r.text(0);
      tr.workload_fingerprint = r.text(2);
      TrendPoint& p = tr.point;
      p.created_utc = d.created_utc;
      p.path = path;
      p.workload = r.text(1);
      p.identity = r.text(3);
      p.step_time_median_s = r.real(4);
      p.bubble_measured = r.real(5);
      p.peak_mem_bytes = r.real(6);
      p.throughput = r.real(7);
      p.slowest_stage_s = r.real(8);
      p.peak_mem_per_rank = r.values<std::uint64_t>(9);
      p.counted_step_times = r.values<double>(10);
      p.loss = r.values<double>(11);
      p.git_sha = d.git_sha;
      d.runs.push_back(std::move(tr));
    }
    return d;
  } catch (const IndexError& e) {
    note(fmt::format("history index {} could not be read ({}): every history file read", path_, e.what()));
    db_.reset();
    return std::nullopt;
  }
}

void HistoryIndex::add(const std::string& path, const FileStamp& stamp, const std::string& sha256,
                       const std::string& results_id, const FileDigest& digest) {
  if (!db_ || read_only_) return;
  pending_.push_back({key_of(path), stamp, false, sha256, results_id, digest});
}

void HistoryIndex::save() {
  if (!db_ || read_only_ || (pending_.empty() && stale_.empty())) return;
  try {
    db_->exec("BEGIN IMMEDIATE");
    Statement del_file(db_->db, "DELETE FROM files WHERE path = ?");
    Statement del_runs(db_->db, "DELETE FROM runs WHERE path = ?");
    for (const auto& key : stale_) {
      del_file.text(1, key).run();
      del_runs.text(1, key).run();
    }
    Statement restamp(db_->db, "UPDATE files SET size = ?, inode = ?, mtime_ns = ?, ctime_ns = ? WHERE path = ?");
    Statement file(db_->db,
                   "INSERT OR REPLACE INTO files(path, size, inode, mtime_ns, ctime_ns, sha256, results_id, role, job, "
                   "fingerprint, created_utc, git_sha) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    Statement run(db_->db,
                  "INSERT INTO runs(path, idx, run, workload, workload_fingerprint, identity, step_time_median_s, "
                  "bubble_measured, peak_mem_bytes, throughput, slowest_stage_s, peak_mem_per_rank, counted_step_times, "
                  "loss) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const auto& p : pending_) {
      const auto size = static_cast<std::int64_t>(p.stamp.size), inode = static_cast<std::int64_t>(p.stamp.inode);
      if (p.stamp_only) {
        restamp.integer(1, size).integer(2, inode).integer(3, p.stamp.mtime_ns).integer(4, p.stamp.ctime_ns).text(5, p.key).run();
        continue;
      }
      const FileDigest& d = p.digest;
      del_runs.text(1, p.key).run();
      file.text(1, p.key).integer(2, size).integer(3, inode).integer(4, p.stamp.mtime_ns).integer(5, p.stamp.ctime_ns);
      file.text(6, p.sha256).text(7, p.results_id).text(8, d.role).text(9, d.job).text(10, d.fingerprint);
      file.text(11, d.created_utc).text(12, d.git_sha).run();
      for (std::size_t i = 0; i < d.runs.size(); ++i) {
        const TrendRun& r = d.runs[i];
        const TrendPoint& q = r.point;
        run.text(1, p.key).integer(2, static_cast<std::int64_t>(i)).text(3, r.run).text(4, q.workload);
        run.text(5, r.workload_fingerprint).text(6, q.identity).real(7, q.step_time_median_s).real(8, q.bubble_measured);
        run.real(9, q.peak_mem_bytes).real(10, q.throughput).real(11, q.slowest_stage_s);
        run.blob(12, blob_of(q.peak_mem_per_rank)).blob(13, blob_of(q.counted_step_times)).blob(14, blob_of(q.loss)).run();
      }
    }
    // Rows of files that are gone (a night deleted, a folder moved away).
    std::vector<std::string> gone;
    {
      Statement all(db_->db, "SELECT path FROM files");
      while (all.step())
        if (std::string key = all.text(0); ::access(key.c_str(), F_OK) != 0) gone.push_back(std::move(key));
    }
    for (const auto& key : gone) {
      del_file.text(1, key).run();
      del_runs.text(1, key).run();
    }
    db_->exec("COMMIT");
  } catch (const IndexError& e) {
    sqlite3_exec(db_->db, "ROLLBACK", nullptr, nullptr, nullptr);
    note(fmt::format("history index {} not updated ({}): the next report reads those files again", path_, e.what()));
  }
  pending_.clear();
  stale_.clear();
}

std::vector<std::string> HistoryIndex::paths() {
  std::vector<std::string> out;
  if (!db_) return out;
  try {
    Statement all(db_->db, "SELECT path FROM files ORDER BY path");
    while (all.step()) out.push_back(all.text(0));
  } catch (const IndexError& e) {
    note(fmt::format("history index {} could not be read ({})", path_, e.what()));
  }
  return out;
}

}  // namespace pipebench
