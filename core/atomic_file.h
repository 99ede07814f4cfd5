// Files written whole or not at all, the way every saver in tandem writes them (snapshots,
// checkpoints, logs, plots, caches).
#pragma once

#include <string>

namespace tandem {

// Writes `bytes` to `path` whole or not at all, even while other processes write the same path:
// a temporary file of this call's own beside it (host, process id and a counter make the name
// unique on a shared file system and among a process's threads), synced, then renamed over
// `path`, so a reader sees the old file or the new one, never a part. Errors name the file.
void write_file_atomically(const std::string& path, const std::string& bytes);

// Syncs a directory: a rename that made a file visible is only durable once its directory is.
void sync_directory(const std::string& dir);

}  // namespace tandem
