// Small facts about the operating system that several layers need: which
// file a path reaches, what a signal is called, and how a shell reads a word.
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

// `s` as one word of a POSIX shell command: unchanged when it holds only
// characters no shell treats specially, else in single quotes (a ' inside
// written '\''). The commands pipebench prints for a user to paste use it.
std::string shell_quote(const std::string& s);

}  // namespace pipebench
