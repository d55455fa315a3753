// The option validators several commands share (commands.hpp).
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"

namespace pipebench::cli {

namespace {
CLI::Validator name_validator(const char* what, const char* name) {
  return CLI::Validator(
      [what](const std::string& s) -> std::string {
        const bool ok = !s.empty() && s.size() <= 128 && s[0] != '.' &&
                        s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                            std::string::npos;
        return ok ? "" : fmt::format("{}: letters, digits, '.', '_', '-', not starting with '.' (at most 128)", what);
      },
      name);
}
}  // namespace

CLI::Validator label_validator() { return name_validator("a label is one folder name", "LABEL"); }
CLI::Validator system_name_validator() { return name_validator("a system name", "SYSTEM"); }

CLI::Validator number_in(double lo, double hi, bool lo_open) {
  return CLI::Validator(
      [lo, hi, lo_open](const std::string& s) -> std::string {
        double x = 0.0;
        std::size_t used = 0;
        try {
          x = std::stod(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        // std::isfinite first: NaN passes every comparison CLI::Range makes.
        const bool ok = used == s.size() && !s.empty() && std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
        return ok ? "" : fmt::format("expected a number in {}{:g}, {:g}], got \"{}\"", lo_open ? "(" : "[", lo, hi, s);
      },
      fmt::format("NUMBER in {}{:g}, {:g}]", lo_open ? "(" : "[", lo, hi));
}

}  // namespace pipebench::cli
