// Helpers of the workload-validation unit tests (test_config, test_llama,
// test_data_parallel): a workload text edited in one place, and the message
// a workload text is refused with.
#pragma once

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"

namespace pipebench::testing {

// `text` with `from` replaced by `to` (`from` must occur).
inline std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  return text.replace(pos, from.size(), to);
}

// The ConfigError message of `toml` parsed as "w.toml" with `overrides`; a
// failed test when it is accepted.
inline std::string error_of(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_job(toml, "w.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("accepted:\n" << toml);
  return "";
}

}  // namespace pipebench::testing
