// SHA-256 (FIPS 180-4): the content hash a report cites for every results
// file it judged (docs/reproduce.md), so "which file" has one answer however
// the file was named, copied or moved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pipebench {

// Incremental: update() any number of times, then hex() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // 64 lowercase hex digits; the object is spent afterwards.
  std::string hex();

 private:
  void block(const unsigned char* p);
  std::uint32_t h_[8];
  unsigned char buf_[64];
  std::size_t used_ = 0;
  std::uint64_t bytes_ = 0;
};

std::string sha256_hex(std::string_view data);

// The hash of the file's bytes, read in 1 MiB pieces; "" when it cannot be
// read (the reason in `why` when given).
std::string sha256_file(const std::string& path, std::string* why = nullptr);

}  // namespace pipebench
