// The MPI transport's message parts: MPI counts are int, so a boundary
// tensor of 2 GiB or more must travel in parts (issue 18).
#include <catch2/catch.hpp>

#include <climits>

#include "pipebench/runtime/transport_mpi.hpp"

using pipebench::kMaxMessageBytes;
using pipebench::message_parts;

TEST_CASE("message parts: none for 0 bytes, one up to the limit, then parts of the limit", "[transport]") {
  CHECK(message_parts(0, 1000).empty());
  CHECK(message_parts(1, 1000) == std::vector<std::pair<std::size_t, std::size_t>>{{0, 1}});
  CHECK(message_parts(1000, 1000) == std::vector<std::pair<std::size_t, std::size_t>>{{0, 1000}});
  CHECK(message_parts(2500, 1000) ==
        std::vector<std::pair<std::size_t, std::size_t>>{{0, 1000}, {1000, 1000}, {2000, 500}});
  CHECK_THROWS(message_parts(10, 0));
}

TEST_CASE("message parts: a 5 GiB tensor in 1 GiB parts, each an int count, covering every byte once", "[transport]") {
  CHECK(kMaxMessageBytes <= static_cast<std::size_t>(INT_MAX));
  for (std::size_t bytes : {std::size_t{2} << 30, (std::size_t{5} << 30) + 3, (std::size_t{1} << 31) - 1}) {
    const auto parts = message_parts(bytes, kMaxMessageBytes);
    std::size_t next = 0;
    for (const auto& [offset, size] : parts) {
      CHECK(offset == next);
      CHECK(size >= 1);
      CHECK(size <= static_cast<std::size_t>(INT_MAX));
      next = offset + size;
    }
    CHECK(next == bytes);
    CHECK(parts.size() == (bytes + kMaxMessageBytes - 1) / kMaxMessageBytes);
  }
}
