// FileStore: the Store seam over one file shared by the ranks of one machine
// (the file:///PATH init method; how Windows users start, as in PyTorch).
//
// Every operation takes a lock on the file (shared to read, exclusive to
// write; muster/platform/locked_file.h), reads the whole file, and rewrites it
// when it changes: the store is for bootstrap, a few kilobytes. Waits poll the
// file (1 ms, backing off to 100 ms).
//
// Who uses the file: each rank registers itself (key "__member/<rank>" =
// "<pid> <start time> <host>") when it opens the store and removes itself when
// the store is destroyed; the last one removes the file. A run that was killed
// leaves the file behind with its ranks registered. The next Open finds every
// registered process gone (pid absent, or reused by a process that started at
// another time) and clears the file, with a warning naming them. A file whose
// registered processes are alive belongs to a run still going: a rank that
// finds its own rank number held by a live process gets FAILED_PRECONDITION
// naming that pid (another job uses the same path).
#ifndef MUSTER_STORE_FILE_STORE_H_
#define MUSTER_STORE_FILE_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "muster/platform/locked_file.h"
#include "muster/store/store.h"

namespace muster::store {

class FileStore final : public Store {
 public:
  // Opens (creating) the store file at `path` as `rank`, handling a stale
  // file as above. Errors: FAILED_PRECONDITION (the rank is taken by a live
  // process; the file is not a store), UNAVAILABLE (cannot create or lock).
  static absl::StatusOr<std::shared_ptr<FileStore>> Open(std::string path,
                                                         int rank);
  ~FileStore() override;

  const std::string& path() const { return path_; }

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(absl::Span<const std::string> keys,
                    absl::Duration timeout) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::Status MultiSet(absl::Span<const std::string> keys,
                        absl::Span<const std::string> values) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  // True: a store file is one machine's.
  bool HostLocal() const override { return true; }

 private:
  using Map = std::map<std::string, std::string>;
  FileStore(std::string path, int rank,
            std::unique_ptr<platform::LockedFile> file);

  // Runs fn on the file's contents under an exclusive (write) or shared lock;
  // writes them back when fn says they changed.
  template <typename Fn>
  absl::Status Locked(bool write, Fn&& fn);
  absl::StatusOr<Map> ReadLocked();
  absl::Status WriteLocked(const Map& map);
  // Polls until every key exists or the timeout passes.
  absl::StatusOr<std::vector<std::string>> WaitFor(
      absl::Span<const std::string> keys, absl::Duration timeout);

  const std::string path_;
  const int rank_;
  const std::unique_ptr<platform::LockedFile> file_;
};

}  // namespace muster::store

#endif  // MUSTER_STORE_FILE_STORE_H_
