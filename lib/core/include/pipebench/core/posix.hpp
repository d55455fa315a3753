// Small facts about the operating system that several layers need: which
// file a path reaches, and what a signal is called.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace pipebench {

// A file's identity: the (device, inode) that `path` reaches, links
// followed; {0, 0} when it reaches nothing. Two spellings of one file (`./x`,
// `d/../x`, a symlink, a hard link) have the same identity.
using FileId = std::pair<std::uint64_t, std::uint64_t>;
FileId file_id(const std::string& path);

// "SIGTERM", "SIGHUP", ... for the signals whose default action ends a
// process; "a signal" for any other. Async-signal-safe (a string literal).
const char* signal_name(int sig) noexcept;

}  // namespace pipebench
