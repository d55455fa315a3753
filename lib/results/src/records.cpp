#include "pipebench/results/records.hpp"

namespace pipebench {

std::string_view evidence_level(BackendKind backend) {
  switch (backend) {
    case BackendKind::sim: return "simulated";
    case BackendKind::cpu: return "measured-cpu";
    case BackendKind::cuda: return "measured-gpu";
  }
  return "?";
}

std::string_view to_string(RunStatus s) {
  switch (s) {
    case RunStatus::ok: return "ok";
    case RunStatus::failed: return "failed";
    case RunStatus::skipped: return "skipped";
  }
  return "?";
}

std::string_view to_string(FailureKind k) {
  switch (k) {
    case FailureKind::none: return "";
    case FailureKind::oom: return "oom";
    case FailureKind::nan: return "nan";
    case FailureKind::timeout: return "timeout";
    case FailureKind::error: return "error";
    case FailureKind::interrupted: return "interrupted";
    case FailureKind::environment: return "environment";
  }
  return "?";
}

std::string_view to_string(TrialOutcome o) {
  switch (o) {
    case TrialOutcome::ok: return "ok";
    case TrialOutcome::oom: return "oom";
    case TrialOutcome::error: return "error";
    case TrialOutcome::nan: return "nan";
    case TrialOutcome::timeout: return "timeout";
  }
  return "?";
}

}  // namespace pipebench
