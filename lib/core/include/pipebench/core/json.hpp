// Minimal streaming JSON writer (RFC 8259 output, UTF-8 passed through,
// control characters escaped). Used for `plan --format json` and reports.
// Commas are inserted automatically; keys are only valid inside objects.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pipebench {

class JsonWriter {
 public:
  explicit JsonWriter(int indent = 2) : indent_(indent) {}
  // Streaming: the text goes to `sink` in pieces of about 1 MiB as it is
  // written (str() then holds only what is not yet flushed); call flush() at
  // the end. Throws Error when a write fails.
  explicit JsonWriter(std::FILE* sink, int indent = 2) : sink_(sink), indent_(indent) {}
  void flush();

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);

  JsonWriter& value(std::string_view v);
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }
  JsonWriter& value(const std::string& v) { return value(std::string_view(v)); }
  JsonWriter& value(double v);           // non-finite values are written as null
  JsonWriter& value(std::int64_t v);
  JsonWriter& value(int v) { return value(static_cast<std::int64_t>(v)); }
  JsonWriter& value(std::uint64_t v);
  JsonWriter& value(bool v);
  JsonWriter& null();

  template <typename T>
  JsonWriter& field(std::string_view k, const T& v) { return key(k).value(v); }
  template <typename T>
  JsonWriter& array(std::string_view k, const std::vector<T>& items) {
    key(k).begin_array();
    for (const auto& x : items) value(x);
    return end_array();
  }

  const std::string& str() const { return out_; }
  // The text, moved out (the writer is left empty).
  std::string take() { return std::move(out_); }

 private:
  void before_value();
  void maybe_flush();
  JsonWriter& close(char bracket);
  void newline();
  std::FILE* sink_ = nullptr;
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written yet
  bool after_key_ = false;
  int indent_;
};

std::string json_escape(std::string_view s);

}  // namespace pipebench
