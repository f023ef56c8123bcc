// Files written so that a failure or a crash never leaves half of one: the
// checkpoints, exported models and adapters, and the PJRT backend's cache of
// compiled programs are all written through write_file_atomically.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace capstep {

// Writes `bytes` to `path` atomically: a temporary file beside it
// ("<path>.tmp.<host>.<pid>.<n>") is written, flushed to disk and renamed over
// the target, so the previous file at `path` survives any failure and a crash
// at any instant leaves either the old or the new file. After a successful
// save, temporaries of this host whose process has died (killed mid-save) are
// removed. Throws Error naming the path and the system's reason.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Throws the Error a save to `path` would throw before writing anything: the
// path is a directory, or no file can be created beside it (a missing or
// read-only directory). Creates and removes one empty temporary. For a long
// run, call it before the work whose result is to be saved.
void check_writable(const std::string& path);

// For tests only: called with the name of each stage of an atomic write
// ("open", "write-half", "fsync", "rename", "fsync-dir"), just before that stage.
// A hook that throws makes the save fail at that stage (the temporary file is
// removed); one that kills the process simulates a crash. Pass {} to remove it.
void set_atomic_write_hook_for_testing(std::function<void(const char* stage)> hook);

}  // namespace capstep
