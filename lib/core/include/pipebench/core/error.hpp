// Project exceptions. Library code throws these and never calls exit();
// the executable maps each kind to a documented exit code (docs/cli.md).
#pragma once

#include <stdexcept>
#include <string>

namespace pipebench {

// Base for every error pipebench raises on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A workload file (or a --set override) is malformed or inconsistent.
// The message always names the file, the line and the key.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A schedule violates its invariants (see schedule.hpp); the message carries
// a step x rank grid of what could execute.
class ScheduleError : public Error {
 public:
  using Error::Error;
};

}  // namespace pipebench
