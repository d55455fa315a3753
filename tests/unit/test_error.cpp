// core/error.hpp: each exception type maps to its documented exit code
// (docs/cli.md), also when caught as the base class.
#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"

using namespace pipebench;

namespace {
ExitCode code_of(const Error& e) { return e.exit_code(); }
}  // namespace

TEST_CASE("exit codes: the documented numbers", "[error]") {
  CHECK(kOk == 0);
  CHECK(kInternalError == 1);
  CHECK(kUsageError == 2);
  CHECK(kInvalidWorkload == 3);
  CHECK(kInvalidSchedule == 4);
  CHECK(kRunFailed == 5);
  CHECK(kRegression == 6);
  CHECK(kDeviceUnavailable == 7);
}

TEST_CASE("exit codes: each exception type, seen through the base class", "[error]") {
  CHECK(code_of(ConfigError("x")) == kInvalidWorkload);
  CHECK(code_of(ScheduleError("x")) == kInvalidSchedule);
  CHECK(code_of(DeviceUnavailableError("x")) == kDeviceUnavailable);
  CHECK(code_of(OutputError("x")) == kUsageError);
  // Run failures are recorded by the executor (exit kRunFailed via the
  // runner); escaping outside a run they are internal errors.
  CHECK(code_of(OutOfMemoryError("x")) == kInternalError);
  CHECK(code_of(NumericalError("x")) == kInternalError);
  CHECK(code_of(StepTimeoutError("x")) == kInternalError);
  CHECK(code_of(PeerAbortedError("x", 3)) == kInternalError);
  CHECK(code_of(PeerLostError("x")) == kRunFailed);  // the checkpoint is published first
  CHECK(code_of(MpiError("x")) == kInternalError);
  CHECK(code_of(ResultsError("x")) == kInternalError);
  CHECK(code_of(Error("x")) == kInternalError);
  CHECK(PeerAbortedError("x", 3).from_rank == 3);
}
