#include "pipebench/core/json.hpp"

#include "pipebench/core/error.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

namespace pipebench {

namespace {
// Appends `s` JSON-escaped to `out` (no quotes). Runs of characters that
// need no escape are appended whole (schedule text is megabytes of them).
void append_escaped(std::string& out, std::string_view s) {
  std::size_t plain = 0;  // where the current run of such characters began
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<int>(c));
    }
  }
  out.append(s.data() + plain, s.size() - plain);
}

constexpr std::size_t kSinkFlushBytes = 1 << 20;
}  // namespace

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_escaped(out, s);
  return out;
}

void JsonWriter::maybe_flush() {
  if (sink_ && out_.size() >= kSinkFlushBytes) flush();
}

void JsonWriter::flush() {
  if (!sink_ || out_.empty()) return;
  if (std::fwrite(out_.data(), 1, out_.size(), sink_) != out_.size())
    throw Error(fmt::format("writing JSON: {}", std::strerror(errno)));
  out_.clear();
}

void JsonWriter::newline() {
  if (indent_ <= 0) return;
  out_ += '\n';
  out_.append(first_.size() * static_cast<std::size_t>(indent_), ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    newline();
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::close(char bracket) {
  const bool empty = first_.back();
  first_.pop_back();
  if (!empty) newline();
  out_ += bracket;
  maybe_flush();
  return *this;
}

JsonWriter& JsonWriter::end_object() { return close('}'); }

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() { return close(']'); }

JsonWriter& JsonWriter::key(std::string_view k) {
  before_value();
  out_ += '"';
  append_escaped(out_, k);
  out_ += indent_ > 0 ? "\": " : "\":";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view v) {
  before_value();
  out_ += '"';
  append_escaped(out_, v);
  out_ += '"';
  maybe_flush();
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  before_value();
  if (std::isfinite(v)) fmt::format_to(std::back_inserter(out_), "{}", v);
  else out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t v) {
  before_value();
  fmt::format_to(std::back_inserter(out_), "{}", v);
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t v) {
  before_value();
  fmt::format_to(std::back_inserter(out_), "{}", v);
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

}  // namespace pipebench
