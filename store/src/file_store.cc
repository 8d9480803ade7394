#include "muster/store/file_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/common/status.h"
#include "muster/platform/host.h"
#include "muster/platform/locked_file.h"

namespace muster::store {

using platform::CurrentProcessId;
using platform::LockedFile;
using platform::ProcessRuns;
using platform::ProcessStartToken;

namespace {

constexpr char kMemberPrefix[] = "__member/";
constexpr char kMagic[] = "muster-file-store 1\n";

// "<pid> <start token> <host>" of this process.
std::string MemberValue() {
  const int64_t pid = CurrentProcessId();
  return absl::StrCat(pid, " ", ProcessStartToken(pid), " ", LocalHostname());
}

// Whether the process a member value describes still runs.
bool MemberAlive(const std::string& value) {
  std::vector<std::string> f = absl::StrSplit(value, ' ');
  int64_t pid = 0;
  if (f.size() < 2 || !absl::SimpleAtoi(f[0], &pid) || pid <= 0) return false;
  if (f.size() >= 3 && f[2] != LocalHostname()) return true;  // Cannot tell.
  return ProcessRuns(pid, f[1]);
}

std::string Serialize(const std::map<std::string, std::string>& map) {
  std::string out = kMagic;
  for (const auto& [k, v] : map) {
    absl::StrAppend(&out, k.size(), " ", v.size(), "\n", k, v, "\n");
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> Parse(
    const std::string& path, absl::string_view text) {
  std::map<std::string, std::string> map;
  if (text.empty()) return map;
  if (!absl::StartsWith(text, kMagic)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path,
        " exists and is not a muster file store: give file:// a path of its "
        "own (it is created, and removed by the last rank)"));
  }
  text.remove_prefix(sizeof(kMagic) - 1);
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    size_t klen = 0;
    size_t vlen = 0;
    std::pair<absl::string_view, absl::string_view> sizes =
        absl::StrSplit(text.substr(0, nl), ' ');
    if (nl == absl::string_view::npos ||
        !absl::SimpleAtoi(sizes.first, &klen) ||
        !absl::SimpleAtoi(sizes.second, &vlen) ||
        text.size() < nl + 1 + klen + vlen + 1) {
      return absl::DataLossError(
          absl::StrCat(path,
                       " is truncated or corrupt (a process died while writing "
                       "it?): delete it"));
    }
    text.remove_prefix(nl + 1);
    map[std::string(text.substr(0, klen))] =
        std::string(text.substr(klen, vlen));
    text.remove_prefix(klen + vlen + 1);
  }
  return map;
}

}  // namespace

FileStore::FileStore(std::string path, int rank,
                     std::unique_ptr<LockedFile> file)
    : path_(std::move(path)), rank_(rank), file_(std::move(file)) {}

absl::StatusOr<std::shared_ptr<FileStore>> FileStore::Open(std::string path,
                                                           int rank) {
  MUSTER_ASSIGN_OR_RETURN(std::unique_ptr<LockedFile> file,
                          LockedFile::Open(path, "the store file"));
  std::shared_ptr<FileStore> store(new FileStore(path, rank, std::move(file)));
  const std::string me = absl::StrCat(kMemberPrefix, rank);
  absl::Status status =
      store->Locked(/*write=*/true, [&](Map& map) {
        std::vector<std::string> dead;
        std::vector<std::string> alive;
        for (const auto& [key, value] : map) {
          if (!absl::StartsWith(key, kMemberPrefix)) continue;
          const std::string who =
              absl::StrCat("rank ", key.substr(sizeof(kMemberPrefix) - 1),
                           " (pid ", value.substr(0, value.find(' ')), ")");
          if (MemberAlive(value)) {
            if (key == me) {
              return absl::FailedPreconditionError(absl::StrCat(
                  "file://", path, " is in use: ", who,
                  " is still running. Another job uses this file, or this rank "
                  "was started twice: give each job its own path"));
            }
            alive.push_back(who);
          } else {
            dead.push_back(who);
          }
        }
        if (alive.empty() && !map.empty()) {
          // Left by a run that ended without cleaning up (killed): none of its
          // processes is left to read it, so clearing it is safe.
          MUSTER_LOG(WARNING)
              << "file://" << path << " was left behind by an earlier run"
              << (dead.empty() ? std::string(" (no live rank registered)")
                               : absl::StrCat(" whose ranks are gone (",
                                              absl::StrJoin(dead, ", "), ")"))
              << ": clearing it";
          map.clear();
        }
        map[me] = MemberValue();
        return absl::OkStatus();
      });
  if (!status.ok()) {
    // Not ours: leave the file as it is.
    return status;
  }
  return store;
}

FileStore::~FileStore() {
  bool remove = false;
  const std::string me = absl::StrCat(kMemberPrefix, rank_);
  (void)Locked(/*write=*/true, [&](Map& map) {
    map.erase(me);
    remove = std::none_of(map.begin(), map.end(), [](const auto& kv) {
      return absl::StartsWith(kv.first, kMemberPrefix);
    });
    // The last rank removes the file (under the lock, so a rank opening it
    // now either saw us registered or creates a new file).
    if (remove) file_->Remove();
    return absl::OkStatus();
  });
}

template <typename Fn>
absl::Status FileStore::Locked(bool write, Fn&& fn) {
  MUSTER_RETURN_IF_ERROR(file_->Lock(write ? LockedFile::Mode::kExclusive
                                           : LockedFile::Mode::kShared));
  absl::Status status;
  absl::StatusOr<Map> map = ReadLocked();
  if (!map.ok()) {
    status = map.status();
  } else {
    const Map before = write ? *map : Map();
    status = fn(*map);
    if (status.ok() && write && *map != before) status = WriteLocked(*map);
  }
  file_->Unlock();
  return status;
}

absl::StatusOr<FileStore::Map> FileStore::ReadLocked() {
  MUSTER_ASSIGN_OR_RETURN(std::string text, file_->ReadAll());
  return Parse(path_, text);
}

absl::Status FileStore::WriteLocked(const Map& map) {
  return file_->WriteAll(Serialize(map));
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  return Locked(true, [&](Map& map) {
    map[std::string(key)] = std::string(value);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<std::string>> FileStore::WaitFor(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration sleep = absl::Milliseconds(1);
  while (true) {
    std::vector<std::string> values;
    std::vector<std::string> missing;
    MUSTER_RETURN_IF_ERROR(Locked(false, [&](Map& map) {
      for (const std::string& k : keys) {
        auto it = map.find(k);
        if (it == map.end()) {
          missing.push_back(k);
        } else {
          values.push_back(it->second);
        }
      }
      return absl::OkStatus();
    }));
    if (missing.empty()) return values;
    if (timeout <= absl::ZeroDuration()) {
      return absl::NotFoundError(absl::StrCat("key '",
                                              absl::StrJoin(missing, "', '"),
                                              "' not found in file://", path_));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("waited ", absl::FormatDuration(timeout), " for key '",
                       absl::StrJoin(missing, "', '"), "' in file://", path_));
    }
    absl::SleepFor(std::min(sleep, deadline - absl::Now()));
    sleep = std::min(sleep * 2, absl::Milliseconds(100));
  }
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key,
                                           absl::Duration timeout) {
  const std::string k(key);
  MUSTER_ASSIGN_OR_RETURN(std::vector<std::string> values,
                          WaitFor(absl::MakeConstSpan(&k, 1), timeout));
  return values[0];
}

absl::StatusOr<int64_t> FileStore::Add(absl::string_view key, int64_t delta) {
  int64_t result = 0;
  MUSTER_RETURN_IF_ERROR(Locked(true, [&](Map& map) {
    std::string& value = map[std::string(key)];
    int64_t current = 0;
    if (!value.empty() && !absl::SimpleAtoi(value, &current)) {
      return absl::InvalidArgumentError(
          absl::StrCat("key '", key, "' holds '", value, "', not an integer"));
    }
    result = current + delta;
    value = absl::StrCat(result);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<std::string> FileStore::CompareSet(absl::string_view key,
                                                  absl::string_view expected,
                                                  absl::string_view desired) {
  std::string result;
  MUSTER_RETURN_IF_ERROR(Locked(true, [&](Map& map) {
    auto it = map.find(std::string(key));
    const bool matches =
        it == map.end() ? expected.empty() : it->second == expected;
    if (matches) map[std::string(key)] = std::string(desired);
    it = map.find(std::string(key));
    result = it == map.end() ? "" : it->second;
    return absl::OkStatus();
  }));
  return result;
}

absl::Status FileStore::Wait(absl::Span<const std::string> keys,
                             absl::Duration timeout) {
  return WaitFor(keys, timeout).status();
}

absl::StatusOr<std::vector<std::string>> FileStore::MultiGet(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  return WaitFor(keys, timeout);
}

absl::Status FileStore::MultiSet(absl::Span<const std::string> keys,
                                 absl::Span<const std::string> values) {
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MultiSet has ", keys.size(), " keys but ", values.size(), " values"));
  }
  return Locked(true, [&](Map& map) {
    for (size_t i = 0; i < keys.size(); ++i) map[keys[i]] = values[i];
    return absl::OkStatus();
  });
}

absl::StatusOr<bool> FileStore::Delete(absl::string_view key) {
  bool erased = false;
  MUSTER_RETURN_IF_ERROR(Locked(true, [&](Map& map) {
    erased = map.erase(std::string(key)) > 0;
    return absl::OkStatus();
  }));
  return erased;
}

absl::StatusOr<int64_t> FileStore::NumKeys() {
  int64_t n = 0;
  MUSTER_RETURN_IF_ERROR(Locked(false, [&](Map& map) {
    for (const auto& [k, v] : map) {
      if (!absl::StartsWith(k, kMemberPrefix)) ++n;
    }
    return absl::OkStatus();
  }));
  return n;
}

}  // namespace muster::store
