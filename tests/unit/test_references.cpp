// SHA-256 against FIPS 180-4's examples, and references.toml (core/references.hpp):
// parsing, every rejection with file:line, system matching and the verdicts.
#include <string>

#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/core/references.hpp"
#include "pipebench/core/sha256.hpp"

using namespace pipebench;

TEST_CASE("sha256: the FIPS 180-4 examples, one-shot and in pieces", "[reproduce]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(sha256_hex(two_blocks) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 pieces;
  const std::string a(1000, 'a');
  for (int i = 0; i < 1000; ++i) pieces.update(a.substr(0, 7)), pieces.update(a.substr(0, 993));
  CHECK(pieces.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");  // 10^6 x 'a'
  // Every padding length: 55, 56, 63, 64 bytes straddle the length field.
  for (std::size_t n : {55u, 56u, 63u, 64u, 65u}) {
    Sha256 bytewise;
    const std::string s(n, 'x');
    for (char c : s) bytewise.update(&c, 1);
    CHECK(bytewise.hex() == sha256_hex(s));
  }
  std::string why;
  CHECK(sha256_file("/nonexistent/file.h5", &why).empty());
  CHECK_FALSE(why.empty());
}

namespace {
// Line numbers matter: the error tests point at them.
const std::string kRefs = R"(schema = 1
[system.laptop]
fingerprint = "cpu | Xeon | 2 ranks"
[system.laptop.default.pipe]
step_time_s = [0.270, -0.05, 0.05, "s"]
peak_mem_bytes = [1000, 0, 0]
[system."*".default.pipe]
step_time_s = [0.3, -0.5, 0.5]
[system."*".default.base]
step_time_s = [0.5, -0.5, 0.5]
)";

std::string error_of(const std::string& text) {
  try {
    parse_references(text, "refs.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string edit(const std::string& from, const std::string& to) {
  std::string s = kRefs;
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}
}  // namespace

TEST_CASE("references: the format parses, with the unit implied by the figure", "[reproduce]") {
  const References r = parse_references(kRefs, "refs.toml");
  REQUIRE(r.systems.size() == 2);
  const SystemReferences& laptop = r.systems[0].name == "laptop" ? r.systems[0] : r.systems[1];
  CHECK(laptop.fingerprint == "cpu | Xeon | 2 ranks");
  const auto& pipe = laptop.runs.at({"default", "pipe"});
  CHECK(pipe.at("step_time_s").value == 0.270);
  CHECK(pipe.at("step_time_s").lower == -0.05);
  CHECK(pipe.at("step_time_s").where == "refs.toml:5");
  CHECK(pipe.at("peak_mem_bytes").unit == "B");
}

TEST_CASE("references: every error names file:line and the key", "[reproduce]") {
  CHECK_THAT(error_of(edit("step_time_s = [0.270", "step_tme_s = [0.270")),
             Catch::Contains("refs.toml:5: system.laptop.default.pipe.step_tme_s: unknown figure"));
  CHECK_THAT(error_of(edit("-0.05, 0.05, \"s\"]", "-0.05, 0.05, \"ms\"]")),
             Catch::Contains("refs.toml:5") && Catch::Contains("measured in \"s\", not \"ms\""));
  CHECK_THAT(error_of(edit("[0.270, -0.05, 0.05, \"s\"]", "[0.270, 0.05, 0.05]")),
             Catch::Contains("refs.toml:5") && Catch::Contains("lower tolerance"));
  CHECK_THAT(error_of(edit("[0.270, -0.05, 0.05, \"s\"]", "[0.270, -0.05, -0.05]")),
             Catch::Contains("refs.toml:5") && Catch::Contains("upper tolerance"));
  CHECK_THAT(error_of(edit("[1000, 0, 0]", "[1000, 0]")), Catch::Contains("refs.toml:6") && Catch::Contains("2 elements"));
  CHECK_THAT(error_of(edit("[1000, 0, 0]", "\"1000\"")), Catch::Contains("refs.toml:6") && Catch::Contains("got a string"));
  CHECK_THAT(error_of(edit("[1000, 0, 0]", "[nan, 0, 0]")), Catch::Contains("refs.toml:6") && Catch::Contains("finite"));
  CHECK_THAT(error_of(edit("fingerprint = \"cpu | Xeon | 2 ranks\"", "fingerprint = 3")),
             Catch::Contains("refs.toml:3: system.laptop.fingerprint: expected a string"));
  CHECK_THAT(error_of(edit("schema = 1", "schema = 2")), Catch::Contains("refs.toml:1: schema"));
  CHECK_THAT(error_of(edit("schema = 1", "schema = 1\nsystems = 3")), Catch::Contains("refs.toml:2: systems: unknown key"));
  CHECK_THAT(error_of("schema = 1\n[system.x.default]\npipe = 3\n"), Catch::Contains("refs.toml:3") && Catch::Contains("run's table"));
  CHECK_THAT(error_of("[system.x\n"), Catch::Contains("refs.toml") && Catch::Contains("syntax error"));
  CHECK_THAT(error_of("[system.\"*\"]\nfingerprint = \"a\"\n[system.\"*\".j.r]\nstep_time_s = [1, 0, 0]\n"),
             Catch::Contains("refs.toml:2") && Catch::Contains("no fingerprint"));
  try {
    load_references("/nonexistent/refs.toml");
    FAIL("accepted a missing file");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("/nonexistent/refs.toml: cannot open"));
  }
}

TEST_CASE("references: matching a system and the verdicts", "[reproduce]") {
  const References r = parse_references(kRefs, "refs.toml");
  const std::map<std::string, double> fast{{"step_time_s", 0.28}, {"peak_mem_bytes", 1000}};
  const std::map<std::string, double> slow{{"step_time_s", 0.29}, {"peak_mem_bytes", 1001}};
  auto verdict = [](const std::vector<ReferenceCheck>& cs, const std::string& figure) {
    for (const auto& c : cs)
      if (c.figure == figure) return c.verdict;
    return std::string("(absent)");
  };
  SECTION("by the name given at run time") {
    const auto cs = check_references(r, "laptop", "other hardware", "default", "pipe", fast);
    REQUIRE(cs.size() == 2);
    CHECK(cs[0].matched_by == "name");
    CHECK(verdict(cs, "step_time_s") == "within");  // 0.28 in [0.2565, 0.2835]
    CHECK(verdict(cs, "peak_mem_bytes") == "within");
    const auto out = check_references(r, "laptop", "", "default", "pipe", slow);
    CHECK(verdict(out, "step_time_s") == "outside");
    CHECK(verdict(out, "peak_mem_bytes") == "outside");  // exact: one byte more is outside
    CHECK_THAT(out[1].evidence, Catch::Contains("0.29 s outside [0.2565, 0.2835] s"));
  }
  SECTION("by hardware fingerprint when no name was given") {
    const auto cs = check_references(r, "", "cpu | Xeon | 2 ranks", "default", "pipe", slow);
    CHECK(cs[0].matched_by == "fingerprint");
    CHECK(verdict(cs, "step_time_s") == "outside");
  }
  SECTION("any other system: '*' logs, never judges") {
    const auto cs = check_references(r, "cluster", "gpu box", "default", "pipe", slow);
    REQUIRE(cs.size() == 1);
    CHECK(cs[0].matched_by == "*");
    CHECK(cs[0].verdict == "logged");
  }
  SECTION("no reference for the run, or no system at all: reported, not failed") {
    const auto cs = check_references(r, "laptop", "", "default", "other_run", fast);
    REQUIRE(cs.size() == 1);
    CHECK(cs[0].verdict == "no reference");
    const References only_laptop = parse_references("[system.laptop.default.pipe]\nstep_time_s = [1, 0, 0]\n", "r.toml");
    const auto none = check_references(only_laptop, "cluster", "", "default", "pipe", fast);
    REQUIRE(none.size() == 1);
    CHECK(none[0].verdict == "no reference");
    CHECK_THAT(none[0].evidence, Catch::Contains("no reference for system cluster"));
  }
  SECTION("a matched system without the run falls back to '*', logged") {
    const auto cs = check_references(r, "laptop", "", "default", "base", fast);
    REQUIRE(cs.size() == 1);
    CHECK(cs[0].system == "*");
    CHECK(cs[0].matched_by == "*");
    CHECK(cs[0].verdict == "logged");
  }
  SECTION("bytes are printed whole") {
    const auto cs = check_references(r, "laptop", "", "default", "pipe", {{"step_time_s", 0.27}, {"peak_mem_bytes", 109890355}});
    CHECK_THAT(cs[0].evidence, Catch::Contains("109890355 B outside [1000, 1000] B"));
  }
  SECTION("a figure the run did not measure") {
    const auto cs = check_references(r, "laptop", "", "default", "pipe", {{"step_time_s", 0.27}});
    CHECK(verdict(cs, "peak_mem_bytes") == "no reference");
  }
}
