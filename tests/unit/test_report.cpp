// Report building blocks: escaping, the loader's handling of bad inputs, the bubble advice.
#include <filesystem>
#include <fstream>
#include <limits>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "pipebench/report/report.hpp"

using namespace pipebench;

TEST_CASE("html_escape escapes the five HTML metacharacters", "[report]") {
  CHECK(html_escape("<script>alert('x')</script> & \"y\"") ==
        "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;");
  CHECK(html_escape("plain text, 1 < 2") == "plain text, 1 &lt; 2");
}

TEST_CASE("load_report skips unreadable files and missing paths with a reason", "[report]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pipebench-report-" + std::to_string(getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "garbage.h5") << "not an HDF5 file";
  std::ofstream(dir / "notes.txt") << "ignored: not .h5";
  ReportOptions o;
  o.inputs = {dir.string(), (dir / "missing.h5").string()};
  const ReportData d = load_report(o);
  CHECK(d.files.empty());
  REQUIRE(d.skipped.size() == 2);
  auto reason_for = [&](const std::string& name) {
    for (const auto& s : d.skipped)
      if (s.path.find(name) != std::string::npos) return s.reason;
    return std::string("(not listed)");
  };
  CHECK_THAT(reason_for("garbage.h5"), Catch::Contains("not a readable HDF5 file"));
  CHECK_THAT(reason_for("missing.h5"), Catch::Contains("no such file"));
  CHECK_FALSE(d.any_regression());
  const std::string html = render_html(d);
  CHECK_THAT(html, Catch::Contains("Skipped files"));
  CHECK_THAT(render_summary_json(d), Catch::Contains("\"any_regression\": false"));
  fs::remove_all(dir);
}

TEST_CASE("expected jobs without a results file are listed as missing", "[report]") {
  ReportOptions o;
  o.inputs = {"/nonexistent/results/nightly_cpu/nightly-20261129"};
  o.expected_jobs = {"nightly_cpu"};
  const ReportData d = load_report(o);
  CHECK(d.missing_jobs == std::vector<std::string>{"nightly_cpu"});
  CHECK_THAT(render_html(d), Catch::Contains("Missing results") && Catch::Contains("nightly_cpu"));
  CHECK_THAT(render_markdown(d), Catch::Contains("**Missing results**"));
  CHECK_THAT(render_summary_json(d), Catch::Contains("\"missing_jobs\": [\n    \"nightly_cpu\""));
}

// The advice once set the measured bubble against the closed form alone and
// blamed "stage imbalance or communication": a DualPipeV sim run whose
// measured bubble equalled its own simulation (17.7%) was sent to compare
// comm_wait_s because the closed form (F = B = W) says 5.9%.
TEST_CASE("bubble advice: communication only past the run's own simulation, the stages past the closed form", "[report]") {
  RunResult r;
  r.bubble_analytic = 0.059;
  r.bubble_simulated = 0.177;
  r.bubble_measured_median = 0.177;
  std::vector<std::string> a = bubble_advice(r);
  REQUIRE(a.size() == 1);
  CHECK_THAT(a[0], Catch::StartsWith("The schedule's bubble with this run's action times (0.177) exceeds its closed form 0.059") &&
                       !Catch::Contains("comm_wait_s"));
  r.bubble_measured_median = 0.25;  // now the executor or the transfers add 7 points as well
  a = bubble_advice(r);
  REQUIRE(a.size() == 2);
  CHECK_THAT(a[0], Catch::Contains("(0.250) exceeds the schedule's own with this run's action times (0.177") &&
                       Catch::Contains("comm_wait_s"));
  r.bubble_analytic = r.bubble_simulated = 0.2;
  r.bubble_measured_median = 0.24;  // within 5 points: nothing to say
  CHECK(bubble_advice(r).empty());
  r.bubble_simulated = std::numeric_limits<double>::quiet_NaN();  // no events: measured vs the closed form
  r.bubble_measured_median = 0.3;
  a = bubble_advice(r);
  REQUIRE(a.size() == 1);
  CHECK_THAT(a[0], Catch::Contains("(0.300) exceeds the closed form 0.200: stage imbalance or communication"));
}
