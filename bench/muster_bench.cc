// muster-bench: collective bandwidth in the manner of nccl-tests, for
// libmuster_comm against Gloo's own allreduce algorithms, in one run.
//
//   muster --standalone --nproc-per-node=2 --no-python build/bin/muster-bench
//       [--min=8] [--max=256M] [--factor=2] [--impls=LIST] [--op=allreduce]
//       [--dtype=float32] [--seconds=0.2] [--batches=5] [--csv=FILE]
//       [--progress]
//
// Implementations (--impls, comma-separated; default all allreduce ones):
//   memcpy               each rank copies its buffer to another (no
//                        communication): the memory's own speed, the
//                        yardstick of the shared-memory allreduce
//   muster               libmuster_comm, its automatic algorithm choice
//   muster:ALGO          libmuster_comm with MUSTER_GLOO_ALGORITHM=ALGO
//                        (ring, ..., bcube_unbound, or shm: shared memory)
//   gloo:ring            raw Gloo AllreduceRing<T>           (constructed once
//   gloo:ring_chunked    raw Gloo AllreduceRingChunked<T>     per size, run
//   gloo:halving_doubling raw Gloo AllreduceHalvingDoubling<T> many times, as
//   gloo:bcube           raw Gloo AllreduceBcube<T>           Gloo's benchmark)
//   gloo:opt_ring        raw gloo::allreduce(), RING          (options per
//   call) gloo:opt_bcube       raw gloo::allreduce(), BCUBE
// --op selects allreduce (all implementations), or allgather, reduce_scatter,
// broadcast (muster only).
//
// Output per implementation, as nccl-tests prints it: size in bytes, element
// count, type, op, time per operation in microseconds (the slowest rank's
// mean), algbw = size / time, busbw = algbw x the collective's factor:
// allreduce 2(n-1)/n, allgather and reduce_scatter (n-1)/n, broadcast 1. For
// allgather the size is the whole output, for reduce_scatter the whole input
// (nccl-tests' convention). Every operation is in place on zeros. This
// machine is shared and noisy, so each size runs --batches batches per
// implementation, round-robin, each batch taking about --seconds / --batches
// (after one warm-up run); the time reported is the best batch's mean. --csv
// appends "impl,op,ranks,bytes,count,time_us,algbw_gbs,busbw_gbs" lines (rank
// 0); --progress prints each result to stderr as it comes.
//
// Raw Gloo runs on its own context, bootstrapped through the same store
// (MUSTER_STORE_ENDPOINT/PREFIX), bound where libmuster_comm binds, on the
// transport libmuster_comm's Gloo backend uses (comm/gloo/gloo_device.h): TCP
// on Linux, libuv on Windows. libuv has no bound buffers, so there the
// gloo:ring, gloo:ring_chunked, gloo:halving_doubling and gloo:bcube classes
// cannot run: they are left out of the default list and refused by name.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "muster/comm/communicator.h"
#include "muster/comm/raw_gloo.h"
#include "muster/common/net.h"
#include "muster/platform/env.h"
#include "muster/store/grpc_store.h"

namespace {

using muster::comm::AllReduceAlgorithm;
using muster::comm::CommOptions;
using muster::comm::Communicator;
using muster::comm::DataType;
using muster::comm::ReduceOp;

struct Flags {
  size_t min_bytes = 8;
  size_t max_bytes = 256u << 20;
  size_t factor = 2;
  std::vector<std::string> impls = {"memcpy",
                                    "muster",
                                    "gloo:ring",
                                    "gloo:ring_chunked",
                                    "gloo:halving_doubling",
                                    "gloo:bcube",
                                    "gloo:opt_ring",
                                    "gloo:opt_bcube"};
  std::string op = "allreduce";
  DataType dtype = DataType::kFloat32;
  double seconds = 0.2;
  int batches = 5;
  bool progress = false;
  std::string csv;
  bool impls_given = false;  // --impls, rather than the default list.
};

// Gloo's algorithm classes, which run only on a transport with bound buffers
// (not on libuv: GlooHasBoundBuffers()).
bool NeedsBoundBuffers(const std::string& impl) {
  return impl == "gloo:ring" || impl == "gloo:ring_chunked" ||
         impl == "gloo:halving_doubling" || impl == "gloo:bcube";
}

// "64", "64K", "16M", "1G" (powers of 1024).
bool ParseSize(absl::string_view text, size_t* out) {
  std::string t = absl::AsciiStrToUpper(text);
  size_t mult = 1;
  if (!t.empty() && (t.back() == 'K' || t.back() == 'M' || t.back() == 'G')) {
    mult = t.back() == 'K' ? 1u << 10 : t.back() == 'M' ? 1u << 20 : 1u << 30;
    t.pop_back();
  }
  size_t v = 0;
  if (!absl::SimpleAtoi(t, &v)) return false;
  *out = v * mult;
  return true;
}

// Returns -1 when the program should go on, else its exit code (0 for --help).
int Parse(int argc, char** argv, Flags* f) {
  CLI::App app(
      "muster-bench: collective bandwidth in the manner of "
      "nccl-tests (run it under muster; see bench/collectives.sh)",
      "muster-bench");
  auto size_option = [&](const std::string& name, size_t* out,
                         const std::string& help) {
    app.add_option_function<std::string>(
           name,
           [out, name](const std::string& v) {
             if (!ParseSize(v, out)) {
               throw CLI::ValidationError(
                   name, "'" + v + "' is not a size (like 8, 64K, 16M, 1G)");
             }
           },
           help)
        ->type_name("SIZE");
  };
  size_option("--min", &f->min_bytes, "smallest size (default 8)");
  size_option("--max", &f->max_bytes, "largest size (default 256M)");
  app.add_option("--factor", f->factor, "size step (default 2)")
      ->check(CLI::Range(size_t{2}, size_t{1024}));
  std::string impls;
  app.add_option("--impls", impls,
                 "comma-separated implementations (see the file's comment)");
  app.add_option("--op", f->op,
                 "allreduce | allgather | reduce_scatter | "
                 "broadcast")
      ->check(CLI::IsMember(
          {"allreduce", "allgather", "reduce_scatter", "broadcast"}));
  std::vector<std::string> dtypes;
  for (int d = 0; d <= 7; ++d) {
    dtypes.emplace_back(muster::comm::DataTypeName(static_cast<DataType>(d)));
  }
  std::string dtype = "float32";
  app.add_option("--dtype", dtype, "element type (default float32)")
      ->check(CLI::IsMember(dtypes));
  app.add_option("--seconds", f->seconds,
                 "time per size per implementation (default 0.2)")
      ->check(CLI::PositiveNumber);
  app.add_option("--batches", f->batches,
                 "batches per size; the best is reported (default 5)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--progress", f->progress, "print each result as it comes");
  app.add_option("--csv", f->csv, "append CSV lines to this file (rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) std::cerr << "muster-bench: ";
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!impls.empty()) {
    f->impls = absl::StrSplit(impls, ',', absl::SkipEmpty());
    f->impls_given = true;
  }
  for (int d = 0; d <= 7; ++d) {
    if (dtypes[d] == dtype) f->dtype = static_cast<DataType>(d);
  }
  return -1;
}

// One implementation at one size: prepare() once, then run() many times.
struct Runner {
  std::function<absl::Status()> run;
};

double BusFactor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reduce_scatter") return (n - 1.0) / n;
  return 1.0;
}

// Leaves out the implementations this platform's Gloo cannot run; false
// (after saying why) when the user named one.
bool DropUnsupportedImpls(Flags* flags) {
  if (muster::comm::RawGloo::HasBoundBuffers()) return true;
  for (const std::string& impl : flags->impls) {
    if (flags->impls_given && NeedsBoundBuffers(impl)) {
      std::cerr << "muster-bench: " << impl << " needs Gloo's bound buffers, "
                << "which its " << muster::comm::RawGloo::TransportName()
                << " transport (this platform's) lacks; use gloo:opt_ring "
                   "or gloo:opt_bcube\n";
      return false;
    }
  }
  std::erase_if(flags->impls, NeedsBoundBuffers);
  return true;
}

// Raw Gloo's own context, over the launcher's store.
absl::StatusOr<std::unique_ptr<muster::comm::RawGloo>> ConnectRawGloo(int rank,
                                                                      int n) {
  muster::store::GrpcStoreOptions so;
  so.endpoint = muster::platform::GetEnv("MUSTER_STORE_ENDPOINT").value_or("");
  so.prefix = muster::platform::GetEnv("MUSTER_STORE_PREFIX").value_or("");
  auto store = muster::store::NewGrpcStore(so);
  if (!store.ok()) return store.status();
  const char* lws = muster::platform::NonEmptyEnv("LOCAL_WORLD_SIZE");
  const bool local = lws != nullptr && std::atoi(lws) == n;
  return muster::comm::RawGloo::Connect(
      std::shared_ptr<muster::store::Store>(std::move(*store)), rank, n,
      local ? std::string("127.0.0.1") : muster::DefaultAdvertisedAddress());
}

// Communicators with forced algorithms (the muster:<algorithm>
// implementations), created in the same order on every rank; false (after
// saying why) on failure.
bool CreateForced(
    const Flags& flags, Communicator& comm,
    std::map<std::string, std::unique_ptr<Communicator>>* forced) {
  const int n = comm.world_size();
  for (const std::string& impl : flags.impls) {
    if (!absl::StartsWith(impl, "muster:")) continue;
    auto algo = impl.substr(7);
    CommOptions options;
    bool found = false;
    for (int a = 1; a <= 7; ++a) {
      if (muster::comm::AllReduceAlgorithmName(
              static_cast<AllReduceAlgorithm>(a)) == algo) {
        options.allreduce_algorithm = static_cast<AllReduceAlgorithm>(a);
        found = true;
      }
    }
    if (!found) {
      std::cerr << "muster-bench: unknown algorithm in " << impl << "\n";
      return false;
    }
    std::vector<int> all(n);
    for (int r = 0; r < n; ++r) all[r] = r;
    auto group = comm.NewGroup(all, options);
    if (!group.ok()) {
      std::cerr << "muster-bench: " << group.status() << "\n";
      return false;
    }
    (*forced)[impl] = std::move(*group);
  }
  return true;
}

// The call `impl` times for --op on `count` elements at `data`; false (after
// saying why) when it cannot be made. `scratch`: memcpy's destination, as
// large as the largest buffer.
bool MakeRunner(const std::string& impl, const Flags& flags, Communicator* c,
                muster::comm::RawGloo* raw, char* data, char* scratch,
                size_t count, int rank, Runner* runner) {
  const size_t esize = muster::comm::DataTypeSize(flags.dtype);
  if (impl == "memcpy") {
    // All ranks copy at once, as they all allreduce at once: they share the
    // memory's bandwidth alike.
    runner->run = [data, scratch, bytes = count * esize] {
      std::memcpy(scratch, data, bytes);
      return absl::OkStatus();
    };
  } else if (absl::StartsWith(impl, "gloo:")) {
    auto made = raw->AllReduceSum(impl.substr(5),
                                  reinterpret_cast<float*>(data), count);
    if (!made.ok()) {
      std::cerr << "muster-bench: " << made.status() << "\n";
      return false;
    }
    runner->run = *std::move(made);
  } else if (flags.op == "allreduce") {
    runner->run = [c, data, count, &flags] {
      return c->AllReduce(data, count, flags.dtype, ReduceOp::kSum);
    };
  } else if (flags.op == "allgather") {
    runner->run = [c, data, count, &flags, rank, esize] {
      return c->AllGather(data + rank * count * esize, data, count,
                          flags.dtype);
    };
  } else if (flags.op == "reduce_scatter") {
    runner->run = [c, data, count, &flags, rank, esize] {
      return c->ReduceScatter(data, data + rank * count * esize, count,
                              flags.dtype, ReduceOp::kSum);
    };
  } else if (flags.op == "broadcast") {
    runner->run = [c, data, count, &flags] {
      return c->Broadcast(data, count, flags.dtype, 0);
    };
  } else {
    std::cerr << "muster-bench: unknown --op " << flags.op << "\n";
    return false;
  }
  return true;
}

// Rank 0's table: one block per implementation, one line per size.
void PrintResults(
    const Flags& flags, int n,
    const std::map<std::string, std::vector<std::string>>& results) {
  for (const std::string& impl : flags.impls) {
    std::cout << absl::StrFormat(
        "# muster-bench %s %s, %d ranks (best of %d batches)\n"
        "#%12s %12s %8s %6s %12s %10s %10s\n",
        impl, flags.op, n, flags.batches, "size(B)", "count", "type", "redop",
        "time(us)", "algbw(GB/s)", "busbw(GB/s)");
    auto it = results.find(impl);
    if (it == results.end()) continue;
    for (const std::string& line : it->second) std::cout << line << "\n";
  }
  std::cout << std::flush;
}

// Rank 0's comparison with memcpy, when it ran: each implementation's time
// over memcpy's at each size, both from this run.
void PrintRatios(const Flags& flags,
                 const std::map<std::string, std::map<size_t, double>>& times) {
  auto base = times.find("memcpy");
  if (base == times.end()) return;
  std::cout << "# time / memcpy's time (the same run, same size)\n#"
            << absl::StrFormat("%12s %12s", "size(B)", "memcpy(us)");
  for (const std::string& impl : flags.impls) {
    if (impl != "memcpy") std::cout << absl::StrFormat(" %14s", impl);
  }
  std::cout << "\n";
  for (const auto& [bytes, copy] : base->second) {
    std::cout << absl::StrFormat(" %12d %12.2f", bytes, copy * 1e6);
    for (const std::string& impl : flags.impls) {
      if (impl == "memcpy") continue;
      auto it = times.find(impl);
      if (it == times.end() || !it->second.contains(bytes)) continue;
      std::cout << absl::StrFormat(" %13.2fx", it->second.at(bytes) / copy);
    }
    std::cout << "\n";
  }
  std::cout << std::flush;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (int rc = Parse(argc, argv, &flags); rc >= 0) return rc;
  if (!DropUnsupportedImpls(&flags)) return 2;
  auto created = Communicator::FromEnvironment();
  if (!created.ok()) {
    std::cerr << "muster-bench: " << created.status() << "\n";
    return 2;
  }
  std::unique_ptr<Communicator> comm = std::move(*created);
  const int rank = comm->rank();
  const int n = comm->world_size();
  const size_t esize = muster::comm::DataTypeSize(flags.dtype);

  // Raw Gloo's context (only for allreduce of float32).
  std::unique_ptr<muster::comm::RawGloo> raw;
  bool need_raw = false;
  for (const std::string& impl : flags.impls) {
    need_raw = need_raw || absl::StartsWith(impl, "gloo:");
  }
  if (need_raw) {
    if (flags.op != "allreduce" || flags.dtype != DataType::kFloat32) {
      std::cerr << "muster-bench: gloo:* implementations run allreduce of "
                   "float32 only\n";
      return 2;
    }
    auto connected = ConnectRawGloo(rank, n);
    if (!connected.ok()) {
      std::cerr << "muster-bench: " << connected.status() << "\n";
      return 2;
    }
    raw = std::move(*connected);
  }

  // Communicators with forced algorithms, created in the same order on every
  // rank.
  std::map<std::string, std::unique_ptr<Communicator>> forced;
  if (!CreateForced(flags, *comm, &forced)) return 2;

  std::ofstream csv;
  if (rank == 0 && !flags.csv.empty()) csv.open(flags.csv, std::ios::app);
  std::vector<char> buffer(std::max<size_t>(flags.max_bytes, esize) * n + 64);
  std::vector<char> scratch;
  if (std::find(flags.impls.begin(), flags.impls.end(), "memcpy") !=
      flags.impls.end()) {
    scratch.resize(buffer.size());
  }
  // results[impl] = one formatted line per size (rank 0).
  std::map<std::string, std::vector<std::string>> results;
  // times[impl][size] = the best batch's seconds per operation (rank 0).
  std::map<std::string, std::map<size_t, double>> times;

  for (size_t bytes = flags.min_bytes; bytes <= flags.max_bytes;
       bytes *= flags.factor) {
    // Per-rank element count, as nccl-tests sizes each collective.
    size_t count = std::max<size_t>(bytes / esize, 1);
    if (flags.op == "allgather" || flags.op == "reduce_scatter") {
      count = std::max<size_t>(count / n, 1);
    }
    char* data = buffer.data();
    // Zeros stay zeros under every reduction: no denormals, no overflow.
    std::fill(buffer.begin(),
              buffer.begin() + std::min(buffer.size(), count * esize * n), 0);
    std::vector<Runner> runners;
    std::vector<int> iters;
    for (const std::string& impl : flags.impls) {
      Runner runner;
      Communicator* c = comm.get();
      if (auto it = forced.find(impl); it != forced.end()) c = it->second.get();
      if (!MakeRunner(impl, flags, c, raw.get(), data, scratch.data(), count,
                      rank, &runner)) {
        return 2;
      }
      // Warm up once, then time one more run; the slowest rank decides the
      // iteration count of each batch.
      absl::Status s = runner.run();
      const absl::Time w0 = absl::Now();
      if (s.ok()) s = runner.run();
      double warm = absl::ToDoubleSeconds(absl::Now() - w0);
      if (s.ok()) {
        s = comm->AllReduce(&warm, 1, DataType::kFloat64, ReduceOp::kMax);
      }
      if (!s.ok()) {
        std::cerr << "muster-bench: rank " << rank << ": " << impl << ": " << s
                  << "\n";
        return 1;
      }
      const double per_batch = flags.seconds / flags.batches;
      iters.push_back(static_cast<int>(
          std::clamp(per_batch / std::max(warm, 1e-7), 1.0, 20000.0)));
      runners.push_back(std::move(runner));
    }
    // Batches round-robin over the implementations, so that a busy moment of
    // the machine hits them all alike; each keeps its best batch.
    std::vector<double> best(runners.size(), 1e30);
    for (int b = 0; b < flags.batches; ++b) {
      for (size_t j = 0; j < runners.size(); ++j) {
        // Odd batches go in reverse order: no implementation always runs
        // first (or last) after the barriers.
        const size_t k = b % 2 == 0 ? j : runners.size() - 1 - j;
        if (raw != nullptr) raw->Barrier();
        absl::Status s = comm->Barrier();
        const absl::Time t0 = absl::Now();
        for (int i = 0; i < iters[k] && s.ok(); ++i) s = runners[k].run();
        double per_op = absl::ToDoubleSeconds(absl::Now() - t0) / iters[k];
        if (s.ok()) {
          s = comm->AllReduce(&per_op, 1, DataType::kFloat64, ReduceOp::kMax);
        }
        if (!s.ok()) {
          std::cerr << "muster-bench: rank " << rank << ": " << flags.impls[k]
                    << ": " << s << "\n";
          return 1;
        }
        best[k] = std::min(best[k], per_op);
      }
    }
    size_t reported = count * esize;
    if (flags.op == "allgather" || flags.op == "reduce_scatter") {
      reported *= n;
    }
    for (size_t k = 0; k < runners.size() && rank == 0; ++k) {
      const double per_op = best[k];
      const double algbw = reported / per_op / 1e9;
      const double busbw = algbw * BusFactor(flags.op, n);
      const std::string line = absl::StrFormat(
          " %12d %12d %8s %6s %12.2f %10.3f %10.3f", reported, count,
          muster::comm::DataTypeName(flags.dtype),
          flags.op == "allreduce" || flags.op == "reduce_scatter" ? "sum" : "-",
          per_op * 1e6, algbw, busbw);
      results[flags.impls[k]].push_back(line);
      times[flags.impls[k]][reported] = per_op;
      if (flags.progress) {
        std::cerr << flags.impls[k] << line << std::endl;
      }
      if (csv.is_open()) {
        csv << absl::StrFormat("%s,%s,%d,%d,%d,%.3f,%.4f,%.4f\n",
                               flags.impls[k], flags.op, n, reported, count,
                               per_op * 1e6, algbw, busbw)
            << std::flush;
      }
    }
  }
  if (rank == 0) {
    PrintResults(flags, n, results);
    PrintRatios(flags, times);
  }
  forced.clear();
  comm->Shutdown();
  return 0;
}
