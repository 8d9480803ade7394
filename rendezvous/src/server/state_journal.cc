#include "rendezvous/src/server/state_journal.h"

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "muster/common/logging.h"
#include "muster/platform/state_file.h"
#include "nlohmann/json.hpp"

namespace muster::rendezvous {
namespace {

constexpr char kFormat[] = "muster-state/1";
constexpr absl::Duration kMinInterval = absl::Milliseconds(200);

}  // namespace

absl::StatusOr<std::unique_ptr<StateJournal>> StateJournal::Open(
    const std::string& dir, store::KvStore* store, Coordinator* coordinator,
    absl::Duration adoption_grace, absl::Time now) {
  if (absl::Status s = platform::PrepareStateDir(dir); !s.ok()) return s;
  std::unique_ptr<StateJournal> j(new StateJournal(dir, store, coordinator));
  absl::StatusOr<std::string> text = platform::ReadStateFile(dir, kFileName);
  if (!text.ok() && !absl::IsNotFound(text.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state-dir: ", text.status().message()));
  }
  if (!text.ok()) {
    MUSTER_LOG(INFO) << "--state-dir=" << dir
                     << ": no state yet; starting fresh";
    return j;
  }
  const std::string path = absl::StrCat(dir, "/", kFileName);
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() ||
      doc.value("format", "") != kFormat) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state-dir: ", path, " is not musterd's state (",
                     kFormat, "); move it away to start fresh"));
  }
  int64_t keys = 0;
  const nlohmann::json empty_object = nlohmann::json::object();
  const nlohmann::json empty_array = nlohmann::json::array();
  const nlohmann::json& store_doc =
      doc.contains("store") && doc["store"].is_object() ? doc["store"]
                                                        : empty_object;
  for (const auto& [ns, entries] : store_doc.items()) {
    if (!entries.is_object()) continue;
    for (const auto& [k64, v] : entries.items()) {
      std::string key, value;
      if (!v.is_string() || !absl::Base64Unescape(k64, &key) ||
          !absl::Base64Unescape(v.get<std::string>(), &value))
        continue;
      if (absl::Status s = store->Set(ns, key, value); !s.ok()) {
        MUSTER_LOG(WARNING) << "--state-dir: a Store key of " << ns
                            << " not restored: " << s.message();
        continue;
      }
      ++keys;
    }
    ++j->restored_namespaces_;
    j->restored_jobs_[ns.substr(0, ns.rfind('/'))] = now + 2 * adoption_grace;
  }
  int jobs = 0;
  const nlohmann::json& jobs_doc =
      doc.contains("jobs") && doc["jobs"].is_array() ? doc["jobs"]
                                                     : empty_array;
  for (const auto& job : jobs_doc) {
    if (!job.is_object()) continue;
    ++jobs;
    MUSTER_LOG(INFO) << "--state-dir: job " << job.value("job_id", "?")
                     << " was " << job.value("state", "?") << " in round "
                     << job.value("round", 0) << " ("
                     << job.value("restart_count", 0)
                     << " restarts); its agents re-announce their round";
    // An ended job's rerun starts its restarts afresh; its rounds go on.
    const std::string state = job.value("state", "");
    const bool ended = state == "SUCCEEDED" || state == "FAILED";
    coordinator->ResumeJob(job.value("job_id", ""),
                           job.value("round", int64_t{0}),
                           ended ? 0 : job.value("restart_count", 0));
  }
  MUSTER_LOG(INFO) << "--state-dir=" << dir << ": resumed " << jobs << " jobs, "
                   << j->restored_namespaces_ << " Store namespaces (" << keys
                   << " keys)";
  return j;
}

std::string StateJournal::JobsJson() const {
  nlohmann::json jobs = nlohmann::json::array();
  const v1::GetStatusResponse status = coordinator_->Status("");
  for (const v1::JobStatus& s : status.jobs()) {
    jobs.push_back({{"job_id", s.job_id()},
                    {"state", s.state()},
                    {"round", s.round()},
                    {"restart_count", s.restart_count()},
                    {"min_nodes", s.min_nodes()},
                    {"max_nodes", s.max_nodes()},
                    {"members", s.members_size()}});
  }
  return jobs.dump();
}

std::string StateJournal::Serialize(const std::string& jobs_json) const {
  nlohmann::json store = nlohmann::json::object();
  for (const auto& [ns, entries] : store_->Snapshot()) {
    nlohmann::json e = nlohmann::json::object();
    for (const auto& [k, v] : entries)
      e[absl::Base64Escape(k)] = absl::Base64Escape(v);
    store[ns] = std::move(e);
  }
  nlohmann::json doc = {{"format", kFormat},
                        {"jobs", nlohmann::json::parse(jobs_json)},
                        {"store", std::move(store)}};
  return doc.dump();
}

void StateJournal::MaybeWrite(absl::Time now) {
  for (auto it = restored_jobs_.begin(); it != restored_jobs_.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    if (coordinator_->Status(it->first).jobs_size() == 0) {
      MUSTER_LOG(INFO) << "--state-dir: no agent of job " << it->first
                       << " came back; dropping its restored Store keys";
      store_->DropNamespacesWithPrefix(absl::StrCat(it->first, "/"));
    }
    it = restored_jobs_.erase(it);
  }
  if (now - last_write_ < kMinInterval) return;
  const uint64_t version = store_->Version();
  std::string jobs = JobsJson();
  if (version == written_version_ && jobs == written_jobs_) return;
  last_write_ = now;
  absl::Status s = platform::WriteStateFile(dir_, kFileName, Serialize(jobs));
  if (!s.ok()) {
    MUSTER_LOG(ERROR) << "--state-dir: cannot write the state: " << s.message();
    return;
  }
  ++writes_;
  written_version_ = version;
  written_jobs_ = std::move(jobs);
}

absl::Status StateJournal::WriteNow() {
  std::string jobs = JobsJson();
  absl::Status s = platform::WriteStateFile(dir_, kFileName, Serialize(jobs));
  if (s.ok()) {
    ++writes_;
    written_version_ = store_->Version();
    written_jobs_ = std::move(jobs);
  }
  return s;
}

}  // namespace muster::rendezvous
