// Byte sizes as written in workload files ("4GiB", "512MB", "1.5 GiB", 1024).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pipebench {

// Parses "<number>[ ]<unit>" with units B, KB/MB/GB/TB (powers of 1000) and
// KiB/MiB/GiB/TiB (powers of 1024), case-sensitive as written here. A bare
// number is bytes. Returns nullopt for anything else, or for a non-positive
// or non-integral byte count.
std::optional<std::uint64_t> parse_bytes(std::string_view text);

// "1.50 GiB"-style rendering with binary units, for tables.
std::string format_bytes(double bytes);

// A change of a byte count, exact and signed: "+4096 B", "-512 B", "+0 B".
// The double form (trend points) takes the exact path for whole counts in
// [0, 2^64) and writes anything else (a damaged file's value) as "+1.8e+19 B";
// neither converts out of range (a subtraction of two uint64 cast to signed
// overflowed on a fuzzed file).
std::string format_byte_change(std::uint64_t before, std::uint64_t after);
std::string format_byte_change(double before, double after);

// Engineering rendering of a count ("1.23 G", "456.0 M") for parameters and FLOPs.
std::string format_count(double count);

// "1.234 s", "12.345 ms", "56.7 us"; "-" for NaN.
std::string format_seconds(double seconds);

// The current UTC time: "20261129T104001Z" (file names) and
// "2026-11-29T10:40:01Z" (ISO 8601).
std::string utc_stamp();
std::string utc_iso8601();

// "12,345,678": exact integers with thousands separators.
std::string group_digits(std::int64_t value);

// `text` safe to print on a terminal or in one log line, and valid UTF-8:
// control characters (bytes below 0x20, DEL, and the C1 controls U+0080..U+009F)
// and bytes that are not well-formed UTF-8 are written as \xNN, so an ESC or NUL
// from a workload, a results file or the command line cannot act on the
// terminal or cut a message, and a damaged byte cannot break a JSON or HTML
// consumer. Well-formed UTF-8 ("ünï") is kept. `keep_newlines`: a multi-line
// message keeps its '\n'.
std::string printable(std::string_view text, bool keep_newlines = false);

// printable() of at most the first `max_bytes` of `text` (cut before a
// UTF-8 sequence, never inside one), with "... (N bytes)" when it was longer:
// for quoting an input's field in a message (a 100,000-character CSV cell).
std::string printable_excerpt(std::string_view text, std::size_t max_bytes = 80);

}  // namespace pipebench
