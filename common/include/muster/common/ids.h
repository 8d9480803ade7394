// The grammar of job and node ids, shared by the launcher (which checks its
// --rdzv-id and node id before it connects) and the rendezvous server (which
// refuses a Join that breaks it with INVALID_ARGUMENT).
//
// Ids appear in store prefixes ("<job>/<round>"), log directories
// (<log-dir>/<job>/) and log lines, so the grammar leaves out '/', '\',
// spaces and control characters, and bounds the length.
#ifndef MUSTER_COMMON_IDS_H_
#define MUSTER_COMMON_IDS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace muster {

// The longest id accepted.
inline constexpr size_t kMaxIdLength = 128;
// The grammar in words, for messages: "[A-Za-z0-9._-]{1,128}".
inline constexpr char kIdGrammar[] =
    "1 to 128 characters from A-Z a-z 0-9 . _ - ([A-Za-z0-9._-]{1,128})";

// Whether id matches [A-Za-z0-9._-]{1,128}. Pure; thread-safe.
bool IsValidId(absl::string_view id);

// OK when id matches the grammar; otherwise INVALID_ARGUMENT that names
// `what` (e.g. "--rdzv-id", "Join: job_id"), the id (C-escaped, the first 64
// bytes of a long one, and its length), the grammar, and `fix` when not empty
// (e.g. "use e.g. --rdzv-id=job-42"). Pure; thread-safe.
absl::Status ValidateId(absl::string_view what, absl::string_view id,
                        absl::string_view fix = "");

// A node id that matches the grammar, made of the host's name and `unique`
// (e.g. "<pid>-<random>"): "<host>-<unique>", where each character of the
// host name outside the grammar becomes '-' and the name is cut so that the
// whole id fits kMaxIdLength (a long FQDN is not an error). `unique` must
// match the grammar and be at most 64 bytes long. Pure; thread-safe.
std::string NodeIdOf(absl::string_view hostname, absl::string_view unique);

}  // namespace muster

#endif  // MUSTER_COMMON_IDS_H_
