// musterd --state-dir: a journal of the jobs, their rounds
// and every Store key, so that a restarted musterd resumes them. One file,
// DIR/state.json, replaced atomically (muster/platform/state_file.h) at most
// every 200 ms and only when something changed; its size is bounded by the
// Store's quotas (KvStoreLimits) and the Coordinator's retention of ended jobs.
//
// On start the Store keys are restored at once; the jobs come back through
// their agents, which re-announce the round they run (Join.claim) and which
// the Coordinator re-adopts when every member is back (adoption_grace). A
// restored namespace whose job no agent brings back within twice the grace is
// dropped. The journal's job lines (id, state, round, restarts) are what the
// log prints on start.
//
// Thread-compatible: the server's tick thread calls MaybeWrite.
#ifndef MUSTER_RENDEZVOUS_SRC_STATE_JOURNAL_H_
#define MUSTER_RENDEZVOUS_SRC_STATE_JOURNAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/store/kv_store.h"

namespace muster::rendezvous {

class StateJournal {
 public:
  static constexpr char kFileName[] = "state.json";

  // Prepares `dir` (made when absent) and restores its Store keys into
  // `store`. Both pointers must outlive the journal. Errors: INVALID_ARGUMENT
  // naming the path for a bad directory or a state file that is not a regular
  // file or not musterd's JSON (move it away).
  static absl::StatusOr<std::unique_ptr<StateJournal>> Open(
      const std::string& dir, store::KvStore* store, Coordinator* coordinator,
      absl::Duration adoption_grace, absl::Time now);

  // Writes the state when it changed and the last write is 200 ms old, and
  // drops restored namespaces no job came back for. Logs a failed write.
  void MaybeWrite(absl::Time now);
  // Writes now (shutdown). Errors as WriteStateFile.
  absl::Status WriteNow();

  int restored_namespaces() const { return restored_namespaces_; }
  int64_t writes() const { return writes_; }

 private:
  StateJournal(std::string dir, store::KvStore* store, Coordinator* coordinator)
      : dir_(std::move(dir)), store_(store), coordinator_(coordinator) {}
  // The journal's JSON, and the job lines alone (to tell whether they
  // changed).
  std::string Serialize(const std::string& jobs_json) const;
  std::string JobsJson() const;

  const std::string dir_;
  store::KvStore* const store_;
  Coordinator* const coordinator_;
  int restored_namespaces_ = 0;
  int64_t writes_ = 0;
  absl::Time last_write_ = absl::InfinitePast();
  uint64_t written_version_ = ~uint64_t{0};
  std::string written_jobs_;
  // Jobs whose namespaces were restored, and when they are dropped unless
  // the Coordinator knows the job by then.
  std::map<std::string, absl::Time> restored_jobs_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_STATE_JOURNAL_H_
