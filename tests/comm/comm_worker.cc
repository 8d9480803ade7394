// The worker of libmuster_comm's process tests.
//
//   comm_worker [--init=METHOD] [--rank=R --world-size=N] [--mode=MODE]
//               [--victim=K] [--timeout=SECONDS] [--count=ELEMENTS]
//
// METHOD is env:// (default: under muster), tcp://HOST:PORT or file:///PATH.
// Modes:
//   check   every collective x dtype x op against the reference
//           (collective_checks.h), then subgroups; prints "rank R/N: all
//           collectives OK" and exits 0, or the first mismatch and exits 1.
//   kill    every rank loops on an AllReduce of --count floats (default 2^20:
//           4 MB, Gloo's mesh; 1024: 4 KB, the direct mesh); rank K (--victim)
//           SIGKILLs itself (Windows: TerminateProcess) 300 ms into the loop,
//           in the middle of one. The others print "rank R/N: AllReduce failed
//           after T ms: STATUS" and exit 0 when the error names "peer rank K"
//           (else 1). SIGTERM is blocked so that a launcher stopping the group
//           cannot cut the report short.
//   init    only initialize, barrier and shut down (prints "rank R/N: up").
//   agree   the collectives every backend has (a job of Linux and Windows
//           ranks runs on libmuster_comm's own mesh: direct_backend.h), each
//           checked against the expected values: AllReduce sum of 1000 and of
//           2^20 float32, AllReduce max of int64, AllGather, Broadcast from the
//           last rank, Barrier. Prints "rank R/N (BACKEND): agree OK, digest D"
//           where D hashes every result (equal on every rank, whatever its OS),
//           and the first sums; exits 0, or prints the mismatch and exits 1.
// Exit 2: initialization failed (the status is printed).
#ifdef _WIN32
#include <windows.h>
#else
#include <signal.h>
#include <unistd.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "muster/comm/communicator.h"
#include "muster/common/status.h"
#include "tests/comm/collective_checks.h"

namespace {

using muster::comm::Communicator;

struct Flags {
  std::string init = "env://";
  int rank = -1;
  int world_size = -1;
  std::string mode = "check";
  int victim = 1;
  double timeout_s = 60;
  int count = 1 << 20;
};

bool Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : a.substr(eq + 1);
    bool ok = true;
    if (key == "--init") {
      f->init = value;
    } else if (key == "--rank") {
      ok = absl::SimpleAtoi(value, &f->rank);
    } else if (key == "--world-size") {
      ok = absl::SimpleAtoi(value, &f->world_size);
    } else if (key == "--mode") {
      f->mode = value;
    } else if (key == "--victim") {
      ok = absl::SimpleAtoi(value, &f->victim);
    } else if (key == "--count") {
      ok = absl::SimpleAtoi(value, &f->count) && f->count > 0;
    } else if (key == "--timeout") {
      ok = absl::SimpleAtod(value, &f->timeout_s);
    } else {
      ok = false;
    }
    if (!ok) {
      std::cerr << "comm_worker: bad flag " << a << "\n";
      return false;
    }
  }
  return true;
}

int Check(Communicator& comm, const std::string& who) {
  absl::Status s = muster::comm::testing::CheckEverything(comm);
  if (s.ok()) {
    // A subgroup of the even ranks runs the reduce-scatter battery too.
    std::vector<int> even;
    for (int r = 0; r < comm.world_size(); r += 2) even.push_back(r);
    auto group = comm.NewGroup(even);
    if (!group.ok()) {
      s = group.status();
    } else if (*group != nullptr) {
      s = muster::comm::testing::CheckReduceScatterAndAllToAll(**group);
    }
  }
  if (s.ok()) s = comm.Barrier();
  if (!s.ok()) {
    std::cout << who << ": FAILED: " << s << std::endl;
    return 1;
  }
  std::cout << who << ": all collectives OK" << std::endl;
  return 0;
}

int Kill(Communicator& comm, const std::string& who, int victim, int count) {
  std::vector<float> data(count, 1.0f);
  const bool me = comm.rank() == victim;
  if (me) {
    std::thread([] {
      absl::SleepFor(absl::Milliseconds(300));
      std::cout << "victim: SIGKILL now" << std::endl;
#ifdef _WIN32
      // What Windows' kill is: no clean-up, the OS closes the sockets.
      TerminateProcess(GetCurrentProcess(), 9);
#else
      kill(getpid(), SIGKILL);
#endif
    }).detach();
  }
  const absl::Time loop_start = absl::Now();
  while (absl::Now() - loop_start < absl::Seconds(60)) {
    const absl::Time start = absl::Now();
    absl::Status s =
        comm.AllReduce(absl::MakeSpan(data), muster::comm::ReduceOp::kAvg);
    if (s.ok()) continue;
    const int64_t ms = absl::ToInt64Milliseconds(absl::Now() - start);
    std::cout << who << ": AllReduce failed after " << ms << " ms: " << s
              << std::endl;
    const bool named =
        absl::StrContains(s.message(), absl::StrCat("peer rank ", victim));
    return named && ms < 10000 ? 0 : 1;
  }
  std::cout << who << ": no failure within 60 s" << std::endl;
  return 1;
}

// FNV-1a over bytes, continued from `h`.
uint64_t Fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

absl::Status Agree(Communicator& comm, uint64_t* digest, std::string* sums) {
  const int r = comm.rank();
  const int n = comm.world_size();
  uint64_t h = 14695981039346656037ull;
  for (int count : {1000, 1 << 20}) {
    // Exact in float32: halves summed over few ranks.
    std::vector<float> data(count);
    for (int i = 0; i < count; ++i) data[i] = (r + 1) + 0.5f * (i % 7);
    MUSTER_RETURN_IF_ERROR(
        comm.AllReduce(absl::MakeSpan(data), muster::comm::ReduceOp::kSum));
    for (int i = 0; i < count; ++i) {
      const float want = n * (n + 1) / 2.0f + n * 0.5f * (i % 7);
      if (data[i] != want) {
        return absl::InternalError(absl::StrCat(
            "AllReduce(", count, ") [", i, "] = ", data[i], ", not ", want));
      }
    }
    h = Fnv(h, data.data(), data.size() * sizeof(float));
    if (sums->empty()) {
      *sums = absl::StrCat(data[0], " ", data[1], " ", data[2]);
    }
  }
  std::vector<int64_t> big(64);
  for (int i = 0; i < 64; ++i)
    big[i] = int64_t{1000} * r + i - (int64_t{1} << 40);
  MUSTER_RETURN_IF_ERROR(
      comm.AllReduce(absl::MakeSpan(big), muster::comm::ReduceOp::kMax));
  for (int i = 0; i < 64; ++i) {
    if (big[i] != int64_t{1000} * (n - 1) + i - (int64_t{1} << 40)) {
      return absl::InternalError(
          absl::StrCat("AllReduce max [", i, "] = ", big[i]));
    }
  }
  h = Fnv(h, big.data(), big.size() * sizeof(int64_t));
  std::vector<int32_t> mine = {r, 7 * r + 1};
  std::vector<int32_t> all(2 * n, -1);
  MUSTER_RETURN_IF_ERROR(
      comm.AllGather(absl::MakeConstSpan(mine), absl::MakeSpan(all)));
  for (int q = 0; q < n; ++q) {
    if (all[2 * q] != q || all[2 * q + 1] != 7 * q + 1) {
      return absl::InternalError(absl::StrCat("AllGather: rank ", q,
                                              "'s block is ", all[2 * q], " ",
                                              all[2 * q + 1]));
    }
  }
  h = Fnv(h, all.data(), all.size() * sizeof(int32_t));
  std::vector<double> cast(16, r);
  if (r == n - 1) {
    for (int i = 0; i < 16; ++i) cast[i] = 0.25 * i - 1;
  }
  MUSTER_RETURN_IF_ERROR(comm.Broadcast(absl::MakeSpan(cast), n - 1));
  for (int i = 0; i < 16; ++i) {
    if (cast[i] != 0.25 * i - 1) {
      return absl::InternalError(
          absl::StrCat("Broadcast [", i, "] = ", cast[i]));
    }
  }
  h = Fnv(h, cast.data(), cast.size() * sizeof(double));
  MUSTER_RETURN_IF_ERROR(comm.Barrier());
  *digest = h;
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!Parse(argc, argv, &flags)) return 2;
#ifndef _WIN32
  if (flags.mode == "kill") {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
#endif
  muster::comm::CommOptions options;
  options.timeout = absl::Seconds(flags.timeout_s);
  auto comm =
      Communicator::Init(flags.init, flags.rank, flags.world_size, options);
  if (!comm.ok()) {
    std::cout << "comm_worker: init " << flags.init
              << " failed: " << comm.status() << std::endl;
    return 2;
  }
  const std::string who =
      absl::StrCat("rank ", (*comm)->rank(), "/", (*comm)->world_size());
  int rc = 0;
  if (flags.mode == "check") {
    rc = Check(**comm, who);
  } else if (flags.mode == "kill") {
    rc = Kill(**comm, who, flags.victim, flags.count);
  } else if (flags.mode == "agree") {
    uint64_t digest = 0;
    std::string sums;
    absl::Status s = Agree(**comm, &digest, &sums);
    const std::string tag =
        absl::StrCat(who, " (", (*comm)->backend_name(), ")");
    if (s.ok()) {
      std::cout << tag << ": agree OK, digest "
                << absl::StrCat(absl::Hex(digest, absl::kZeroPad16))
                << ", sums " << sums << std::endl;
    } else {
      std::cout << tag << ": agree FAILED: " << s << std::endl;
    }
    rc = s.ok() ? 0 : 1;
  } else if (flags.mode == "init") {
    absl::Status s = (*comm)->Barrier();
    std::cout << who << (s.ok() ? ": up" : absl::StrCat(": ", s.ToString()))
              << std::endl;
    rc = s.ok() ? 0 : 1;
  } else {
    std::cerr << "comm_worker: unknown mode " << flags.mode << "\n";
    return 2;
  }
  (*comm)->Shutdown();
  return rc;
}
