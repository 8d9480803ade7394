#include "comm/src/progress_file.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "comm/src/os.h"
#include "muster/comm/progress.h"
#include "muster/common/logging.h"
#include "muster/common/status.h"
#include "muster/platform/env.h"

namespace muster::comm {
namespace internal {
namespace {

// Field offsets in the file (see progress.h). Each line is "<name> <value>\n".
constexpr char kHeader[] = "muster-progress 2\n";
struct Field {
  const char* name;
  size_t width;
};
constexpr Field kPid{"pid", 10};
constexpr Field kUpdated{"updated_unix_ms", 16};
constexpr Field kStarted{"started", 20};
constexpr Field kFinished{"finished", 20};
constexpr Field kReported{"reported", 20};
constexpr Field kCurrent{"current", 24};
constexpr Field kSince{"since_unix_ms", 16};
constexpr Field kCompute{"compute_us", 16};
constexpr Field kWait{"wait_us", 16};
constexpr Field kFields[] = {kPid,     kUpdated, kStarted, kFinished, kReported,
                             kCurrent, kSince,   kCompute, kWait};

// The offset of field f's value.
size_t Offset(const Field& f) {
  size_t at = sizeof(kHeader) - 1;
  for (const Field& g : kFields) {
    at += std::strlen(g.name) + 1;
    if (&g == &f || std::strcmp(g.name, f.name) == 0) return at;
    at += g.width + 1;
  }
  return at;
}

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }
int64_t NowNs() { return absl::GetCurrentTimeNanos(); }

struct Registry {
  absl::Mutex mu;
  std::map<std::string, ProgressFile*> files ABSL_GUARDED_BY(mu);
  std::map<std::string, bool> failed ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

}  // namespace

ProgressFile::ProgressFile(std::unique_ptr<MappedFile> file, std::string path)
    : file_(std::move(file)), map_(file_->data()), path_(std::move(path)) {}

absl::StatusOr<ProgressFile*> ProgressFile::Open(const std::string& path) {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  auto it = registry.files.find(path);
  if (it != registry.files.end()) return it->second;

  // The initial text, with every field at its place.
  std::string text = kHeader;
  for (const Field& f : kFields) {
    absl::StrAppend(&text, f.name, " ");
    if (&f == &kFields[5]) {
      std::string value = "-";
      value.resize(f.width, ' ');
      absl::StrAppend(&text, value, "\n");
    } else {
      absl::StrAppend(&text, std::string(f.width, '0'), "\n");
    }
  }
  text.resize(kProgressFileSize - 1, ' ');
  text += '\n';
  MUSTER_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped,
                          MappedFile::Create(path, text, "the progress file"));
  auto* file = new ProgressFile(std::move(mapped), path);
  {
    std::lock_guard<std::mutex> file_lock(file->mu_);
    file->WriteNumber(Offset(kPid), kPid.width,
                      static_cast<uint64_t>(CurrentProcessId()));
    file->Touch(NowMs());
  }
  registry.files[path] = file;
  return file;
}

ProgressFile* ProgressFile::ForOptions(const std::string& option_path) {
  std::string path = option_path;
  if (path.empty()) {
    const char* env = platform::NonEmptyEnv("MUSTER_PROGRESS_FILE");
    if (env == nullptr) return nullptr;
    path = env;
  }
  absl::StatusOr<ProgressFile*> file = Open(path);
  if (file.ok()) return *file;
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  if (!registry.failed[path]) {
    registry.failed[path] = true;
    MUSTER_LOG(WARNING) << file.status()
                        << " (progress will not be recorded there)";
  }
  return nullptr;
}

absl::Status ProgressFile::ReportAll() {
  std::vector<ProgressFile*> files;
  {
    Registry& registry = GetRegistry();
    absl::MutexLock lock(&registry.mu);
    for (auto& [path, file] : registry.files) files.push_back(file);
  }
  if (files.empty()) {
    const char* env = platform::NonEmptyEnv("MUSTER_PROGRESS_FILE");
    if (env == nullptr) return absl::OkStatus();
    absl::StatusOr<ProgressFile*> file = Open(env);
    if (!file.ok()) return file.status();
    files.push_back(*file);
  }
  for (ProgressFile* file : files) file->Report();
  return absl::OkStatus();
}

void ProgressFile::WriteNumber(size_t offset, size_t width, uint64_t value) {
  char* p = map_ + offset + width;
  for (size_t i = 0; i < width; ++i) {
    *--p = static_cast<char>('0' + value % 10);
    value /= 10;
  }
}

void ProgressFile::WriteText(size_t offset, size_t width,
                             absl::string_view text) {
  const size_t n = std::min(width, text.size());
  std::memcpy(map_ + offset, text.data(), n);
  std::memset(map_ + offset + n, ' ', width - n);
}

void ProgressFile::Touch(int64_t now_ms) {
  WriteNumber(Offset(kUpdated), kUpdated.width, static_cast<uint64_t>(now_ms));
}

void ProgressFile::Begin(absl::string_view op) {
  const int64_t now_ns = NowNs();
  const int64_t now = now_ns / 1000000;
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ == finished_) {
    // Nothing was in flight: the time since the last operation ended was the
    // rank's own work (none before its first operation).
    if (idle_since_ns_ > 0 && now_ns > idle_since_ns_) {
      compute_us_ += static_cast<uint64_t>(now_ns - idle_since_ns_) / 1000;
      WriteNumber(Offset(kCompute), kCompute.width, compute_us_);
    }
    busy_since_ns_ = now_ns;
  }
  ++started_;
  WriteNumber(Offset(kStarted), kStarted.width, started_);
  WriteText(Offset(kCurrent), kCurrent.width, op);
  WriteNumber(Offset(kSince), kSince.width, static_cast<uint64_t>(now));
  Touch(now);
}

void ProgressFile::End() {
  const int64_t now_ns = NowNs();
  const int64_t now = now_ns / 1000000;
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_;
  WriteNumber(Offset(kFinished), kFinished.width, finished_);
  if (finished_ >= started_) {
    // The last operation in flight ended: the time since the first of them
    // began was spent communicating and waiting for the other ranks.
    if (now_ns > busy_since_ns_) {
      wait_us_ += static_cast<uint64_t>(now_ns - busy_since_ns_) / 1000;
      WriteNumber(Offset(kWait), kWait.width, wait_us_);
    }
    idle_since_ns_ = now_ns;
    WriteText(Offset(kCurrent), kCurrent.width, "-");
    WriteNumber(Offset(kSince), kSince.width, 0);
  }
  Touch(now);
}

void ProgressFile::Report() {
  const int64_t now = NowMs();
  std::lock_guard<std::mutex> lock(mu_);
  ++reported_;
  WriteNumber(Offset(kReported), kReported.width, reported_);
  Touch(now);
}

}  // namespace internal

absl::Status ReportProgress() { return internal::ProgressFile::ReportAll(); }

absl::StatusOr<ProgressSnapshot> ReadProgressFile(const std::string& path) {
  auto read = [&]() -> absl::StatusOr<std::string> {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return absl::NotFoundError(absl::StrCat("no progress file at ", path));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  std::string text;
  for (int attempt = 0; attempt < 10; ++attempt) {
    absl::StatusOr<std::string> a = read();
    if (!a.ok()) return a.status();
    absl::StatusOr<std::string> b = read();
    if (!b.ok()) return b.status();
    text = *a;
    if (*a == *b) break;
  }
  // Format 1 (256 bytes, before the speed counters) is read too: its
  // compute_us and wait_us are 0.
  if (!absl::StartsWith(text, "muster-progress 1\n") &&
      !absl::StartsWith(text, "muster-progress 2\n")) {
    return absl::DataLossError(
        absl::StrCat(path, " is not a muster progress file"));
  }
  ProgressSnapshot snap;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    bool ok = true;
    if (kv.first == "pid") {
      ok = absl::SimpleAtoi(value, &snap.pid);
    } else if (kv.first == "updated_unix_ms") {
      ok = absl::SimpleAtoi(value, &snap.updated_unix_ms);
    } else if (kv.first == "started") {
      ok = absl::SimpleAtoi(value, &snap.started);
    } else if (kv.first == "finished") {
      ok = absl::SimpleAtoi(value, &snap.finished);
    } else if (kv.first == "reported") {
      ok = absl::SimpleAtoi(value, &snap.reported);
    } else if (kv.first == "current") {
      snap.current = std::string(value);
    } else if (kv.first == "since_unix_ms") {
      ok = absl::SimpleAtoi(value, &snap.since_unix_ms);
    } else if (kv.first == "compute_us") {
      ok = absl::SimpleAtoi(value, &snap.compute_us);
    } else if (kv.first == "wait_us") {
      ok = absl::SimpleAtoi(value, &snap.wait_us);
    }
    if (!ok) {
      return absl::DataLossError(
          absl::StrCat(path, ": malformed line '", line, "'"));
    }
  }
  return snap;
}

}  // namespace muster::comm
