// Byte-size parsing and rendering; the JSON writer; file identity and signal names.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "pipebench/core/json.hpp"
#include "pipebench/core/posix.hpp"
#include "pipebench/core/units.hpp"

using namespace pipebench;

TEST_CASE("parse_bytes: binary and decimal units, bare numbers", "[units]") {
  CHECK(parse_bytes("4GiB") == 4ull << 30);
  CHECK(parse_bytes("4 GiB") == 4ull << 30);
  CHECK(parse_bytes("1.5GiB") == 1610612736ull);
  CHECK(parse_bytes("512MB") == 512000000ull);
  CHECK(parse_bytes("80GB") == 80000000000ull);
  CHECK(parse_bytes("1024") == 1024ull);
  CHECK(parse_bytes("7B") == 7ull);
  CHECK(parse_bytes("2TiB") == 2ull << 40);
  // "3.3GiB" was refused: 3543348019.2 bytes is not whole. Fractions of a larger unit round to the byte.
  CHECK(parse_bytes("3.3GiB") == 3543348019ull);
  CHECK(parse_bytes("1.2 GiB") == 1288490189ull);  // 1288490188.8
  CHECK(parse_bytes("0.0005KiB") == 1ull);         // 0.512 bytes rounds to 1
  for (const char* bad : {"", "GiB", "4gib", "4 XB", "-1GiB", "0", "0.5B", "7.5", "0.0001KiB", "1.2.3MB", "4GiB extra"})
    CHECK_FALSE(parse_bytes(bad).has_value());
}

TEST_CASE("format helpers", "[units]") {
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(4.0 * (1ull << 30)) == "4.00 GiB");
  CHECK(format_count(1234567) == "1.23 M");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(-2048) == "-2.00 KiB");
  CHECK(format_count(999) == "999");
  CHECK(format_count(2.5e15) == "2.50 P");
  CHECK(format_count(3e18) == "3000.00 P");  // past the last unit: stays in it
  CHECK(group_digits(0) == "0");
  CHECK(group_digits(1234567) == "1,234,567");
  CHECK(group_digits(-32256) == "-32,256");
  CHECK(group_digits(999) == "999");
  CHECK(format_seconds(1.5) == "1.500 s");
  CHECK(format_seconds(0.0123) == "12.300 ms");
  CHECK(format_seconds(999999.0) == "999999.000 s");
  // It printed 1.6e297 s as 298 digits (a sim run with sim_flops_per_s = 1e-300).
  CHECK(format_seconds(1.6e297) == "1.6e+297 s");
  CHECK(format_seconds(-2.5e6) == "-2.5e+06 s");
  CHECK(format_seconds(std::numeric_limits<double>::infinity()) == "inf s");
}

// fuzz.py (UBSan): compare printed a memory difference as
// (long long)candidate - (long long)reference, which overflows for a
// damaged file's 2^63-byte peak.
TEST_CASE("format_byte_change: exact and signed over the whole uint64 range", "[units]") {
  CHECK(format_byte_change(std::uint64_t{700}, std::uint64_t{4796}) == "+4096 B");
  CHECK(format_byte_change(std::uint64_t{4796}, std::uint64_t{700}) == "-4096 B");
  CHECK(format_byte_change(std::uint64_t{5}, std::uint64_t{5}) == "+0 B");
  CHECK(format_byte_change(std::uint64_t{146944}, std::uint64_t{1} << 63) == "+9223372036854628864 B");
  CHECK(format_byte_change(std::uint64_t{0}, ~std::uint64_t{0}) == "+18446744073709551615 B");
  CHECK(format_byte_change(~std::uint64_t{0}, std::uint64_t{0}) == "-18446744073709551615 B");
  CHECK(format_byte_change(2893824.0, 2897920.0) == "+4096 B");
  CHECK(format_byte_change(0.0, 1.8446744073709552e19) == "+1.84e+19 B");  // 2^64: not a uint64
  CHECK(format_byte_change(-1.0, 5.0) == "+6 B");
}

TEST_CASE("JsonWriter: nesting, commas, escaping, non-finite numbers", "[json]") {
  JsonWriter w(0);
  w.begin_object();
  w.field("a", 1).field("s", "q\"\\\n\x01<").field("x", 0.5).field("nan", 0.0 / 0.0);
  w.array("v", std::vector<int>{1, 2});
  w.key("o").begin_object().end_object();
  w.key("e").begin_array().end_array();
  w.field("t", true);
  w.end_object();
  CHECK(w.str() == R"({"a":1,"s":"q\"\\\n\u0001<","x":0.5,"nan":null,"v":[1,2],"o":{},"e":[],"t":true})");
}

TEST_CASE("printable_excerpt: long fields cut at a character, their length said", "[units]") {
  CHECK(printable_excerpt("short") == "short");
  CHECK(printable_excerpt(std::string(100000, 'x')) == std::string(80, 'x') + "... (100000 bytes)");
  // "ü" is two bytes: a cut at byte 3 of "abü..." falls inside it and moves before it.
  CHECK(printable_excerpt("ab\xc3\xbc\xc3\xbc", 3) == "ab... (6 bytes)");
  CHECK(printable_excerpt("a\x1b[31mbcdef", 4) == "a\\x1b[3... (11 bytes)");
}

TEST_CASE("printable: control characters escaped, text and UTF-8 kept", "[units]") {
  CHECK(printable("plain ünïcode-ok") == "plain ünïcode-ok");
  CHECK(printable(std::string("a\x1b[31mb\0c", 9)) == "a\\x1b[31mb\\x00c");
  CHECK(printable("x\x7fy\tz\n") == "x\\x7fy\\x09z\\x0a");
  CHECK(printable("one\ntwo", true) == "one\ntwo");
  // Bytes that are not well-formed UTF-8 (a flipped bit, a cut sequence, an overlong form, a surrogate) and the
  // C1 controls (U+009B is an 8-bit CSI) are escaped; every other sequence up to 4 bytes is kept.
  CHECK(printable("a\xb1z") == "a\\xb1z");
  CHECK(printable("cut \xc3") == "cut \\xc3");
  CHECK(printable("\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80") == "\\xc0\\xaf \\xed\\xa0\\x80 \\xf4\\x90\\x80\\x80");
  CHECK(printable("csi \xc2\x9b" "31m") == "csi \\xc2\\x9b31m");
  CHECK(printable("\xc2\xa0\xe2\x82\xac\xf0\x9f\x98\x80") == "\xc2\xa0\xe2\x82\xac\xf0\x9f\x98\x80");
  CHECK(group_digits(INT64_MIN) == "-9,223,372,036,854,775,808");
}

TEST_CASE("file_id: one file under every spelling; signal_name", "[units][posix]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pipebench-posix-" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "x") << "x";
  fs::create_symlink(dir / "x", dir / "link");
  CHECK(file_id((dir / "x").string()) != FileId{0, 0});
  CHECK(file_id((dir / "link").string()) == file_id((dir / "x").string()));
  CHECK(file_id((dir / "sub" / ".." / "x").string()) == file_id((dir / "x").string()));
  CHECK(file_id((dir / "missing").string()) == FileId{0, 0});
  fs::remove_all(dir);
  CHECK(std::string(signal_name(SIGHUP)) == "SIGHUP");
  CHECK(std::string(signal_name(SIGTERM)) == "SIGTERM");
  CHECK(std::string(signal_name(SIGSEGV)) == "a signal");
}
