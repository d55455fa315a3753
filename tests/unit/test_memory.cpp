// Memory tracker: categories, current and peak, the out-of-memory contract.
#include <catch2/catch.hpp>

#include "pipebench/plan/memory.hpp"

using namespace pipebench;

TEST_CASE("current and peak per category and in total", "[memory]") {
  MemoryTracker m(3, 1000);
  m.reserve(MemCategory::params, 100, "w");
  m.reserve(MemCategory::activations, 300, "a0");
  m.reserve(MemCategory::activations, 300, "a1");
  CHECK(m.current(MemCategory::activations) == 600);
  CHECK(m.current_total() == 700);
  m.release(MemCategory::activations, 300);
  m.reserve(MemCategory::comm, 50, "c");
  CHECK(m.current(MemCategory::activations) == 300);
  CHECK(m.peak(MemCategory::activations) == 600);
  CHECK(m.peak(MemCategory::comm) == 50);
  CHECK(m.peak(MemCategory::grads) == 0);
  CHECK(m.current_total() == 450);
  CHECK(m.peak_total() == 700);
  m.reset_peaks();
  CHECK(m.peak(MemCategory::activations) == 300);
  CHECK(m.peak_total() == 450);
}

TEST_CASE("exceeding capacity throws 'out of memory' with the sizes and changes nothing", "[memory]") {
  MemoryTracker m(1, 1000);
  m.reserve(MemCategory::params, 600, "parameters");
  try {
    m.reserve(MemCategory::activations, 401, "activations of micro-batch 2");
    FAIL("no exception");
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("rank 1: out of memory: tried to allocate 401 B (401 bytes) for activations of micro-batch 2"));
    CHECK_THAT(msg, Catch::Contains("total capacity of 1000 B (1000 bytes) of which 400 B is free"));
    CHECK_THAT(msg, Catch::Contains("params 600 B"));
  }
  CHECK(m.current_total() == 600);
  CHECK(m.peak(MemCategory::activations) == 0);
  m.reserve(MemCategory::activations, 400, "exactly fits");
  CHECK(m.current_total() == 1000);
  CHECK_THROWS_AS(m.reserve(MemCategory::workspace, 1, "one more byte"), OutOfMemoryError);
}

TEST_CASE("a reservation's name made on demand is made only for the message", "[memory]") {
  MemoryTracker m(0, 1000);
  int made = 0;
  auto name = [&] {
    ++made;
    return std::string("activations of micro-batch 7");
  };
  m.reserve(MemCategory::activations, 1000, name);
  CHECK(made == 0);
  CHECK(m.current_total() == 1000);
  try {
    m.reserve(MemCategory::activations, 1, name);
    FAIL("no exception");
  } catch (const OutOfMemoryError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("for activations of micro-batch 7"));
  }
  CHECK(made == 1);
}

TEST_CASE("releasing more than is held is a logic error", "[memory]") {
  MemoryTracker m(0, 100);
  m.reserve(MemCategory::grads, 10, "g");
  CHECK_THROWS_AS(m.release(MemCategory::grads, 11), std::logic_error);
  CHECK_THROWS_AS(m.release(MemCategory::params, 1), std::logic_error);
}
