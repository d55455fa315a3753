// HDF5 results: write/read round trip, never overwriting, the default path.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <hdf5.h>
#include <unistd.h>

#include "pipebench/results/metrics.hpp"
#include "pipebench/results/results.hpp"
#include "pipebench/schedule/schedule.hpp"

using namespace pipebench;
namespace fs = std::filesystem;

namespace {
JobResult sample() {
  JobResult jr;
  jr.root_attrs = {{"tool_version", "0.1.0"}, {"job_name", "t"}, {"job_toml", "schema = 1\n"}, {"label", "x"}};
  jr.overrides = {"model.hidden=8", "run.p.schedule=gpipe"};
  jr.hostnames = {"a", "b"};
  jr.pids = {11, 12};
  jr.provenance_attrs = {{"cpu_model", "CPU \"quoted\" <x>"}, {"environment", "A=1\nB=2\n"}};
  jr.status = "partial";
  jr.evidence_level = "simulated";
  RunResult r;
  r.spec.name = "p";
  r.spec.pipeline_size = 2;
  r.spec.micro_batch_size = 3;
  r.spec.num_microbatches = 4;
  r.schedule_name = "1f1b";
  r.layers_per_stage = {2, 2};
  r.warmup = 1;
  r.repeats = 1;
  r.step_time_s = {0.5, 0.25};
  r.is_warmup = {1, 0};
  r.loss = {NAN, 2.5};
  r.busy_s = {{0.1, 0.2}, {0.3, 0.4}};
  r.comm_wait_s = r.idle_s = r.forward_s = r.backward_s = r.optimizer_s = r.busy_s;
  r.slowest_stage_s = r.bubble_measured = r.grad_norm = r.imbalance = {1.0, 2.0};
  r.clipped = {0, 1};
  r.peak_mem_bytes = {100, 200};
  for (auto& c : r.peak_mem_by_category) c = {1, 2};
  r.memory_capacity_bytes = {1000, 1000};
  r.stage_params = {7, 8};
  r.peak_live_activations = {2, 1};
  r.stage_layers = {{0, 1}, {2, 3}};
  r.events = {{0, 1, ActionKind::B, 3, 0, 0.5, 0.75}};
  r.decision = "not_feasible";
  r.decision_reasons = {"one", "two"};
  r.failure_kind = FailureKind::oom;
  r.status = RunStatus::failed;
  r.failure_message = "rank 1: out of memory";
  r.failing_rank = 1;
  jr.runs.push_back(r);
  RunResult s;
  s.spec.name = "a_skipped";  // created second: read back second (creation order, not name order)
  s.status = RunStatus::skipped;
  s.failure_message = "needs 8 ranks";
  jr.runs.push_back(s);
  return jr;
}

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("pipebench-test-" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}
}  // namespace

TEST_CASE("results round trip through HDF5", "[results]") {
  const fs::path dir = temp_dir();
  const std::string path = write_results((dir / "t" / "r.h5").string(), sample());
  CHECK(path == (dir / "t" / "r.h5").string());
  const JobResult back = read_results(path);
  CHECK(back.status == "partial");
  CHECK(back.evidence_level == "simulated");
  CHECK(back.overrides == sample().overrides);
  CHECK(back.root_attrs.at("job_toml") == "schema = 1\n");
  CHECK(back.provenance_attrs.at("cpu_model") == "CPU \"quoted\" <x>");
  CHECK(back.hostnames == std::vector<std::string>{"a", "b"});
  CHECK(back.pids == std::vector<std::int64_t>{11, 12});
  REQUIRE(back.runs.size() == 2);
  const RunResult& r = back.runs[0];
  CHECK(r.spec.name == "p");
  CHECK(r.status == RunStatus::failed);
  CHECK(r.failure_kind == FailureKind::oom);
  CHECK(r.failing_rank == 1);
  CHECK(r.layers_per_stage == std::vector<int>{2, 2});
  CHECK(r.busy_s == sample().runs[0].busy_s);
  CHECK(std::isnan(r.loss[0]));
  CHECK(r.loss[1] == 2.5);
  CHECK(r.stage_layers[1] == std::array<int, 2>{2, 3});
  REQUIRE(r.events.size() == 1);
  CHECK(r.events[0].kind == ActionKind::B);
  CHECK(r.events[0].microbatch == 3);
  CHECK(r.events[0].end_s == 0.75);
  CHECK(r.decision_reasons == std::vector<std::string>{"one", "two"});
  CHECK(back.runs[1].spec.name == "a_skipped");
  CHECK(back.runs[1].status == RunStatus::skipped);
  CHECK(back.runs[1].step_time_s.empty());
  fs::remove_all(dir);
}

// Events are read kEventBlock (65 536) rows at a time; ReadEvents::skip
// checks every one and keeps none, so a damaged event is refused either way.
TEST_CASE("results: events read in blocks, kept or skipped, every one checked", "[results]") {
  const fs::path dir = temp_dir();
  JobResult jr = sample();
  RunResult& r = jr.runs[0];
  r.spec.num_microbatches = 8192;  // room for 3 x 3 steps x 2 ranks x 8192 events
  r.events.clear();
  for (int i = 0; i < 140000; ++i)
    r.events.push_back({i % 2, (i / 2) % 2, i % 3 == 0 ? ActionKind::F : ActionKind::B, (i / 4) % 8192, 0, i * 1e-6,
                        i * 1e-6 + 5e-7, 0.0});
  const std::string path = write_results((dir / "t" / "r.h5").string(), jr);
  const JobResult kept = read_results(path), skipped = read_results(path, ReadEvents::skip);
  REQUIRE(kept.runs[0].events.size() == r.events.size());
  for (std::size_t i : {std::size_t{0}, std::size_t{65535}, std::size_t{65536}, std::size_t{131072}, r.events.size() - 1}) {
    INFO("event " << i);
    CHECK(kept.runs[0].events[i].rank == r.events[i].rank);
    CHECK(kept.runs[0].events[i].microbatch == r.events[i].microbatch);
    CHECK(std::abs(kept.runs[0].events[i].start_s - r.events[i].start_s) < 1e-9);
  }
  CHECK(skipped.runs[0].events.empty());
  CHECK(skipped.runs[0].step_time_s == kept.runs[0].step_time_s);

  // Damage one event in the last block: rank 9 of a 2-rank run.
  {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t ds = H5Dopen2(file, "/runs/p/events", H5P_DEFAULT);
    const hid_t ft = H5Dget_type(ds), nt = H5Tget_native_type(ft, H5T_DIR_ASCEND);
    const std::size_t row = H5Tget_size(nt);
    const std::size_t at = H5Tget_member_offset(nt, static_cast<unsigned>(H5Tget_member_index(nt, "rank")));
    std::vector<unsigned char> rows(row * r.events.size());
    CHECK(H5Dread(ds, nt, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) >= 0);
    const std::int32_t nine = 9;
    std::memcpy(rows.data() + row * 139000 + at, &nine, sizeof(nine));
    CHECK(H5Dwrite(ds, nt, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) >= 0);
    H5Tclose(nt);
    H5Tclose(ft);
    H5Dclose(ds);
    H5Fclose(file);
  }
  for (ReadEvents how : {ReadEvents::keep, ReadEvents::skip})
    CHECK_THROWS_WITH(read_results(path, how), Catch::Contains("an event (step 0, rank 9") && Catch::Contains("lies outside"));
  fs::remove_all(dir);
}

// stream_events hands over whole (step, rank) groups even where a group
// straddles two 65 536-row blocks, so an EventDigest fed piece by piece gives
// the whole run's figures (the report's simulated chart).
TEST_CASE("results: stream_events gives whole (step, rank) groups; a digest of the pieces is the run's", "[results]") {
  const fs::path dir = temp_dir();
  JobResult jr = sample();
  RunResult& r = jr.runs[0];
  r.spec.num_microbatches = 8192;
  r.events.clear();
  for (int step = 0; step < 3; ++step)  // 6 groups of 24 000: blocks end inside the 3rd and the 6th
    for (int rank = 0; rank < 2; ++rank)
      for (int i = 0; i < 24000; ++i)
        r.events.push_back({step, rank, i % 2 == 0 ? ActionKind::F : ActionKind::B, (i / 2) % 8192, 0, i * 1e-6,
                            i * 1e-6 + (1 + (i * 7 + step + rank) % 13) * 1e-7, 0.0});
  const std::string path = write_results((dir / "t" / "r.h5").string(), jr);
  const JobResult header = read_results(path, ReadEvents::skip);
  CHECK(header.runs[0].events_in_file == r.events.size());
  std::vector<std::vector<EventRecord>> pieces;
  stream_events(path, header.runs[0], [&](const EventRecord* e, std::size_t n) { pieces.emplace_back(e, e + n); });
  REQUIRE(pieces.size() >= 2);
  std::vector<EventRecord> all;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    if (k + 1 < pieces.size()) {
      INFO("piece " << k);
      CHECK((pieces[k].back().step != pieces[k + 1].front().step || pieces[k].back().rank != pieces[k + 1].front().rank));
    }
    all.insert(all.end(), pieces[k].begin(), pieces[k].end());
  }
  const JobResult full = read_results(path);
  REQUIRE(all.size() == full.runs[0].events.size());
  CHECK(std::equal(all.begin(), all.end(), full.runs[0].events.begin(), [](const EventRecord& a, const EventRecord& b) {
    return a.step == b.step && a.rank == b.rank && a.microbatch == b.microbatch && a.start_s == b.start_s && a.end_s == b.end_s;
  }));
  const Schedule s = make_1f1b(2, 8192);
  EventDigest digest(s, false);
  for (const auto& piece : pieces) digest.add(piece.data(), piece.size());
  const SimCosts streamed = digest.costs(1), whole = measured_costs(s, full.runs[0].events, 1);
  CHECK(streamed.forward == whole.forward);
  CHECK(streamed.backward == whole.backward);
  CHECK(whole.forward.at(0) > 0.0);
  CHECK_THROWS_WITH(stream_events(path, RunResult{}, [](const EventRecord*, std::size_t) {}), Catch::Contains("not a pipebench run name"));
  fs::remove_all(dir);
}

TEST_CASE("results: long datasets are chunked and compressed; event times are kept to 2^-30 s", "[results]") {
  const fs::path dir = temp_dir();
  JobResult jr = sample();
  RunResult& r = jr.runs[0];
  r.spec.num_microbatches = 35000;  // 2 steps x 2 ranks x 35000 forwards: more than two write blocks of 65536
  r.events.clear();
  for (int i = 0; i < 140000; ++i)  // times with every mantissa bit set, as clock differences have
    r.events.push_back({i / 70000, i / 35000 % 2, ActionKind::F, i % 35000, 0, 0.1 + i * 1e-4 / 3.0,
                        0.1 + (i + 1) * 1e-4 / 3.0, i % 2 ? 1e-6 / 7.0 : 0.0});
  const std::string path = write_results((dir / "r.h5").string(), jr);
  const JobResult back = read_results(path);
  REQUIRE(back.runs[0].events.size() == r.events.size());
  for (std::size_t i = 0; i < r.events.size(); ++i) {
    const EventRecord &a = r.events[i], &b = back.runs[0].events[i];
    REQUIRE((a.step == b.step && a.rank == b.rank && a.microbatch == b.microbatch && a.kind == b.kind));
    for (const auto& [wrote, read] : {std::pair{a.start_s, b.start_s}, {a.end_s, b.end_s}, {a.wait_s, b.wait_s}}) {
      REQUIRE(std::abs(read - wrote) <= std::ldexp(1.0, -31));
      REQUIRE(std::ldexp(read, 30) == std::nearbyint(std::ldexp(read, 30)));  // a multiple of 2^-30 s
    }
  }
  CHECK(back.runs[0].events[0].wait_s == 0.0);  // 0 stays exactly 0
  // 140000 rows of 48 bytes, about 6.7 MB raw: deflated well below half.
  CHECK(fs::file_size(path) < 2800 * 1024);
  fs::remove_all(dir);
}

// A chunked dataset whose extent promises more chunks than are stored (a
// damaged header or chunk index) would read the missing ones as zeros —
// events at step 0 of rank 0 that never ran. The reader refuses it.
TEST_CASE("results: a chunked dataset with chunks missing is a damaged file", "[results]") {
  const fs::path dir = temp_dir();
  JobResult jr = sample();
  jr.runs[0].spec.num_microbatches = 5000;
  const std::string path = write_results((dir / "r.h5").string(), jr);
  {  // events replaced by 40000 declared rows in chunks of 16384, only the first chunk written
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(f >= 0);
    const hid_t g = H5Gopen2(f, "runs/p", H5P_DEFAULT);
    const hid_t old = H5Dopen2(g, "events", H5P_DEFAULT);
    const hid_t type = H5Dget_type(old);
    H5Dclose(old);
    REQUIRE(H5Ldelete(g, "events", H5P_DEFAULT) >= 0);
    const hsize_t dims = 40000, chunk = 16384;
    const hid_t space = H5Screate_simple(1, &dims, nullptr), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    const hid_t ds = H5Dcreate2(g, "events", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    std::vector<char> zeros(static_cast<std::size_t>(chunk * H5Tget_size(type)), 0);
    const hsize_t start = 0;
    const hid_t part = H5Scopy(space), mem = H5Screate_simple(1, &chunk, nullptr);
    H5Sselect_hyperslab(part, H5S_SELECT_SET, &start, nullptr, &chunk, nullptr);
    REQUIRE(H5Dwrite(ds, type, mem, part, H5P_DEFAULT, zeros.data()) >= 0);
    for (hid_t s : {part, mem, space}) H5Sclose(s);
    H5Pclose(dcpl);
    H5Dclose(ds);
    H5Tclose(type);
    H5Gclose(g);
    H5Fclose(f);
  }
  CHECK_THROWS_WITH(read_results(path), Catch::Contains("dataset events: 1 of its 3 chunks stored (a damaged file)"));
  fs::remove_all(dir);
}

namespace {
// Replaces the string attribute `name` of runs/p in the file at `path`.
void rewrite_run_attr(const std::string& path, const char* name, const char* value) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t g = H5Gopen2(f, "runs/p", H5P_DEFAULT);
  REQUIRE(H5Adelete(g, name) >= 0);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(g, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(H5Awrite(a, type, &value) >= 0);
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(type);
  H5Gclose(g);
  H5Fclose(f);
}

// Replaces the integer attribute `name` of runs/p with a 64-bit `value`.
void rewrite_run_int_attr(const std::string& path, const char* name, std::int64_t value) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t g = H5Gopen2(f, "runs/p", H5P_DEFAULT);
  REQUIRE(H5Adelete(g, name) >= 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(g, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(H5Awrite(a, H5T_NATIVE_INT64, &value) >= 0);
  H5Aclose(a);
  H5Sclose(space);
  H5Gclose(g);
  H5Fclose(f);
}
}  // namespace

// An int64 attribute was narrowed to int: pipeline_size 2^32 + p read as p
// and passed every shape check.
TEST_CASE("results: an integer attribute beyond 32 bits is a damaged file, not narrowed", "[results]") {
  const fs::path dir = temp_dir();
  const std::string path = write_results((dir / "r.h5").string(), sample());
  const int p = read_results(path).runs.at(0).spec.pipeline_size;
  const std::int64_t bad = (std::int64_t{1} << 32) + p;
  rewrite_run_int_attr(path, "pipeline_size", bad);
  CHECK_THROWS_WITH(read_results(path), Catch::Contains(fmt::format("pipeline_size: {} is beyond a 32-bit integer", bad)));
  fs::remove_all(dir);
}

TEST_CASE("results: an unknown value in a file is quoted with its control characters escaped", "[results]") {
  const fs::path dir = temp_dir();
  const std::string path = write_results((dir / "r.h5").string(), sample());
  rewrite_run_attr(path, "status", "ok\x1b[31m");  // one that would recolour a terminal
  try {
    read_results(path);
    FAIL("no error for an unknown status");
  } catch (const ResultsError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("unexpected value"));
    CHECK(msg.find('\x1b') == std::string::npos);
  }
  fs::remove_all(dir);
}

// A damaged decision (report.hostile_files once read a bit-flipped file whose
// skipped run's decision was "", and summary.json carried it) is refused,
// as an unknown status is: the report lists the file as skipped with the reason.
TEST_CASE("results: a decision outside the four is a damaged file", "[results]") {
  const fs::path dir = temp_dir();
  for (const char* bad : {"", "feasiblf"}) {
    const std::string path = write_results((dir / "r.h5").string(), sample());
    rewrite_run_attr(path, "decision", bad);
    CHECK_THROWS_WITH(read_results(path), Catch::Contains("run p: decision \"" + std::string(bad) + "\" is not one of"));
  }
  fs::remove_all(dir);
}

TEST_CASE("write_results never overwrites and leaves no temporary file", "[results]") {
  const fs::path dir = temp_dir();
  const std::string first = write_results((dir / "r.h5").string(), sample());
  const std::string second = write_results((dir / "r.h5").string(), sample());
  const std::string third = write_results((dir / "r.h5").string(), sample());
  CHECK(first == (dir / "r.h5").string());
  CHECK(second == (dir / "r-1.h5").string());
  CHECK(third == (dir / "r-2.h5").string());
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    CHECK(e.path().extension() == ".h5");
  }
  CHECK(files == 3);
  fs::remove_all(dir);
}

TEST_CASE("ResultsWriter: every checkpoint is a valid file; finish publishes and removes it", "[results]") {
  const fs::path dir = temp_dir();
  const std::string final_path = (dir / "job" / "r.h5").string();
  JobResult jr = sample();
  const RunResult first = jr.runs.at(0);
  {
    ResultsWriter w(final_path);
    CHECK(w.partial_path() == final_path + ".partial");
    CHECK(fs::exists(final_path + ".partial.tmp"));  // the folder was proven writable at once
    jr.launch_status = "incomplete";
    jr.runs = {first};
    w.checkpoint(jr);
    JobResult back = read_results(w.partial_path());
    CHECK(back.launch_status == "incomplete");
    CHECK(back.runs.size() == 1);
    jr.runs.push_back(first);
    jr.runs.back().spec.name = "second";
    w.checkpoint(jr);
    CHECK(read_results(w.partial_path()).runs.size() == 2);
    CHECK_FALSE(fs::exists(final_path));
    jr.launch_status = "complete";
    CHECK(w.finish(jr) == final_path);
  }
  CHECK(read_results(final_path).launch_status == "complete");
  CHECK_FALSE(fs::exists(final_path + ".partial"));
  CHECK_FALSE(fs::exists(final_path + ".partial.tmp"));
  fs::remove_all(dir);
}

TEST_CASE("ResultsWriter: two writers asking for one name keep both results", "[results]") {
  // Issue 33: two launches of one Slurm job in the same second asked for the
  // same NAME-<jobid>.h5; one's checkpoint rename found the other's gone
  // ("cannot rename ... No such file or directory") and its results were lost.
  const fs::path dir = temp_dir();
  const std::string name = (dir / "job" / "20261201T000000Z-777.h5").string();
  JobResult jr = sample();
  jr.runs.resize(1);
  std::string a_path, b_path;
  {
    ResultsWriter a(name), b(name);
    CHECK(a.final_path() == name);
    CHECK(b.final_path() == (dir / "job" / "20261201T000000Z-777-1.h5").string());
    CHECK(b.partial_path() != a.partial_path());
    a.checkpoint(jr);
    b.checkpoint(jr);
    a.checkpoint(jr);
    b.checkpoint(jr);
    a_path = a.finish(jr);
    b_path = b.finish(jr);
  }
  CHECK(a_path != b_path);
  CHECK(read_results(a_path).runs.size() == 1);
  CHECK(read_results(b_path).runs.size() == 1);
  // Claims are gone with their writers; a later writer takes the next free name.
  CHECK_FALSE(fs::exists(name + ".claim"));
  CHECK(ResultsWriter(name).final_path() == (dir / "job" / "20261201T000000Z-777-2.h5").string());
  fs::remove_all(dir);
}

TEST_CASE("mark_unwritten_runs: a run whose record could not be written is an error with the reason, not interrupted",
          "[results]") {
  const fs::path dir = temp_dir();
  const std::string path = (dir / "r.h5.partial").string();
  JobResult jr = sample();
  jr.runs.resize(1);
  RunResult lost = jr.runs[0];
  lost.spec.name = "second";
  lost.status = RunStatus::failed;
  lost.failure_kind = FailureKind::interrupted;
  lost.failure_message = "the launch ended during this run";
  jr.runs.push_back(lost);
  std::rename(write_results((dir / "r.h5").string(), jr).c_str(), path.c_str());
  CHECK(mark_unwritten_runs(path, "cannot write results file r.h5.partial.tmp: No space left on device"));
  const JobResult back = read_results(path);
  REQUIRE(back.runs.size() == 2);
  CHECK(back.runs[0].failure_kind == jr.runs[0].failure_kind);  // the completed run is untouched
  CHECK(back.runs[1].failure_kind == FailureKind::error);
  CHECK_THAT(back.runs[1].failure_message, Catch::Contains("could not be written") && Catch::Contains("No space left on device"));
  CHECK(back.runs[1].decision == "inconclusive");
  CHECK_FALSE(mark_unwritten_runs(path, "again"));  // nothing interrupted is left
  CHECK_FALSE(mark_unwritten_runs((dir / "none.h5").string(), "no file"));
  fs::remove_all(dir);
}

TEST_CASE("ResultsWriter: streamed events go to a scratch store and into every file written after their run ended",
          "[results]") {
  const fs::path dir = temp_dir();
  const std::string final_path = (dir / "r.h5").string();
  JobResult jr = sample();
  jr.runs.resize(1);
  jr.runs[0].status = RunStatus::ok;
  jr.runs[0].spec.num_microbatches = 65536;  // room for the events below (the reader bounds them)
  jr.runs[0].events.clear();
  // More than one block of rows, appended in uneven pieces; times that the
  // file rounds to 2^-30 s.
  std::vector<EventRecord> events;
  for (int i = 0; i < 150000; ++i)
    events.push_back({i % 2, i % 2, static_cast<ActionKind>(i % 3), i / 4, 0, i * 1e-3 + 1e-12, i * 1e-3 + 5e-4, 1e-4});
  {
    ResultsWriter w(final_path);
    std::size_t at = 0;
    for (std::size_t piece : {1u, 70000u, 3u, 65536u}) {
      w.append_events("p", events.data() + at, piece);
      at += piece;
    }
    w.checkpoint(jr);  // the run has not ended: its events are not in the file yet
    CHECK(read_results(w.partial_path()).runs.at(0).events.empty());
    w.append_events("p", events.data() + at, events.size() - at);
    w.end_events("p");
    CHECK_THROWS_AS(w.append_events("p", events.data(), 1), ResultsError);  // ended
    // The store leaves no file of its own, even while it is in use.
    for (const auto& entry : fs::directory_iterator(dir))
      CHECK_THAT(entry.path().string(), !Catch::Matchers::EndsWith(".events.tmp"));
    w.checkpoint(jr);
    CHECK(read_results(w.partial_path()).runs.at(0).events.size() == events.size());
    CHECK(w.finish(jr) == final_path);
  }
  const std::vector<EventRecord> back = read_results(final_path).runs.at(0).events;
  REQUIRE(back.size() == events.size());
  for (std::size_t i = 0; i < events.size(); i += 997) {
    CHECK(back[i].microbatch == events[i].microbatch);
    CHECK(back[i].kind == events[i].kind);
    CHECK(back[i].start_s == std::ldexp(std::nearbyint(std::ldexp(events[i].start_s, 30)), -30));
  }
  CHECK(back.back().end_s == Approx(events.back().end_s));
  fs::remove_all(dir);
}

TEST_CASE("ResultsWriter: an abandoned launch keeps its checkpoint; publish_partial links it into place", "[results]") {
  const fs::path dir = temp_dir();
  const std::string final_path = (dir / "r.h5").string();
  JobResult jr = sample();
  jr.launch_status = "incomplete";
  {
    ResultsWriter w(final_path);
    w.checkpoint(jr);
  }  // destroyed without finish(): what a crash leaves
  CHECK(fs::exists(final_path + ".partial"));
  CHECK_FALSE(fs::exists(final_path + ".partial.tmp"));
  CHECK(read_results(final_path + ".partial").runs.size() == jr.runs.size());
  CHECK(publish_partial((final_path + ".partial").c_str(), final_path.c_str()));
  CHECK(read_results(final_path).launch_status == "incomplete");
  CHECK_FALSE(fs::exists(final_path + ".partial"));
  // Never over an existing file.
  std::ofstream(final_path + ".partial") << "x";
  CHECK_FALSE(publish_partial((final_path + ".partial").c_str(), final_path.c_str()));
  fs::remove_all(dir);
}

TEST_CASE("ResultsWriter: a folder that cannot be written is refused at once, with the path and the reason", "[results]") {
  const fs::path dir = temp_dir();
  fs::create_directories(dir);
  std::ofstream(dir / "plain-file") << "x";
  const std::string bad = (dir / "plain-file" / "job" / "r.h5").string();
  try {
    ResultsWriter w(bad);
    FAIL("no error for a folder under a plain file");
  } catch (const ResultsError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Matchers::Contains((dir / "plain-file").string()));
    CHECK_THAT(msg, Catch::Matchers::Contains("Not a directory"));
  }
  fs::remove_all(dir);
}

TEST_CASE("read_results rejects what is not a results file", "[results]") {
  const fs::path dir = temp_dir();
  fs::create_directories(dir);
  std::ofstream(dir / "x.h5") << "not hdf5";
  CHECK_THROWS_AS(read_results((dir / "x.h5").string()), ResultsError);
  CHECK_THROWS_AS(read_results((dir / "missing.h5").string()), ResultsError);
  fs::remove_all(dir);
}

TEST_CASE("default results path: results/<job>/[<label>/]<stamp>-<id>.h5", "[results]") {
  CHECK(default_results_path("results", "default", "", "20261129T104001Z", "123") ==
        "results/default/20261129T104001Z-123.h5");
  CHECK(default_results_path("out", "j", "nightly", "20261129T104001Z", "9") == "out/j/nightly/20261129T104001Z-9.h5");
}

// The rank grid's node per rank (issue 36): written with the coordinates,
// read back, and a node outside the run's ranks is a damaged file.
TEST_CASE("results: each rank's node round trips; one outside the run is a damaged file", "[results]") {
  const fs::path dir = temp_dir();
  JobResult jr = sample();
  RunResult& r = jr.runs[0];
  r.spec.pipeline_size = 1;
  r.spec.data_parallel = 2;  // the two records are replicas 0 and 1 of one stage
  r.layers_per_stage = {4};
  r.stage_layers = {{0, 3}, {0, 3}};
  r.pipeline_rank = {0, 0};
  r.data_rank = {0, 1};
  r.tensor_rank = {0, 0};
  r.node = {0, 1};
  const std::string path = write_results((dir / "r.h5").string(), jr);
  CHECK(read_results(path).runs.at(0).node == std::vector<int>{0, 1});
  r.node = {0, 2};
  const std::string damaged = write_results((dir / "d.h5").string(), jr);
  CHECK_THROWS_WITH(read_results(damaged), Catch::Contains("rank 1 is on node 2, outside the run's 2 ranks"));
  fs::remove_all(dir);
}
