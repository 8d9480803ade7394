#include "tests/comm/collective_checks.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace muster::comm::testing {
namespace {

// ---- Values that every type holds exactly ----

template <typename T>
T FromInt(int v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T::FromFloat(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return v.ToFloat();
  } else {
    return static_cast<double>(v);
  }
}

template <typename T>
std::string Show(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return absl::StrCat(v.ToFloat(), " (bits 0x", absl::Hex(v.bits), ")");
  } else if constexpr (std::is_integral_v<T>) {
    return absl::StrCat(static_cast<int64_t>(v));
  } else {
    return absl::StrCat(v);
  }
}

template <typename T>
constexpr bool kUnsigned = std::is_same_v<T, uint8_t>;

// Rank r's element i for op: small integers, so that sums over 4 ranks stay
// exact in float16 and int8, and products are powers of two.
template <typename T>
int IntValue(int rank, size_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) return 1 + static_cast<int>((rank + i) % 2);
  const int v = static_cast<int>((rank * 7 + i * 3) % 13);
  return kUnsigned<T> ? v : v - 6;
}

template <typename T>
T Value(int rank, size_t i, ReduceOp op) {
  return FromInt<T>(IntValue<T>(rank, i, op));
}

// The reference reduction of element i over n ranks, computed in int64 and
// converted once (exact for these values), with avg divided as documented:
// integers truncate toward zero; floating types divide in their own precision
// (float16 and bfloat16 through float).
template <typename T>
T Expected(int n, size_t i, ReduceOp op) {
  int64_t acc = IntValue<T>(0, i, op);
  for (int r = 1; r < n; ++r) {
    const int64_t v = IntValue<T>(r, i, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (op != ReduceOp::kAvg) return FromInt<T>(static_cast<int>(acc));
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(acc / n);
  } else if constexpr (std::is_same_v<T, Float16> ||
                       std::is_same_v<T, BFloat16>) {
    return T::FromFloat(static_cast<float>(acc) / static_cast<float>(n));
  } else {
    return static_cast<T>(acc) / static_cast<T>(n);
  }
}

template <typename T>
bool Same(T a, T b) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return a.bits == b.bits;
  } else {
    return a == b;
  }
}

// A distinct value per (rank, i) for the data-movement collectives.
template <typename T>
T Tagged(int rank, size_t i) {
  const int v = static_cast<int>((rank * 31 + i) % 97);
  return FromInt<T>(kUnsigned<T> ? v : v - 48);
}

#define MUSTER_CHECK_OK(expr) \
  do {                        \
    absl::Status s_ = (expr); \
    if (!s_.ok()) return s_;  \
  } while (0)

template <typename T>
absl::Status Mismatch(const Communicator& comm, absl::string_view what,
                      size_t i, T got, T want) {
  return absl::InternalError(
      absl::StrCat("rank ", comm.rank(), "/", comm.world_size(), ": ", what,
                   " dtype ", DataTypeName(DataTypeOf<T>()), " element ", i,
                   ": got ", Show(got), ", want ", Show(want)));
}

template <typename Fn>
absl::Status ForEachType(Fn&& fn) {
  MUSTER_CHECK_OK(fn(float{}));
  MUSTER_CHECK_OK(fn(double{}));
  MUSTER_CHECK_OK(fn(int32_t{}));
  MUSTER_CHECK_OK(fn(int64_t{}));
  MUSTER_CHECK_OK(fn(int8_t{}));
  MUSTER_CHECK_OK(fn(uint8_t{}));
  MUSTER_CHECK_OK(fn(Float16{}));
  MUSTER_CHECK_OK(fn(BFloat16{}));
  return absl::OkStatus();
}

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin,
                             ReduceOp::kMax, ReduceOp::kAvg};

template <typename T>
absl::Status AllReduceOne(Communicator& comm, ReduceOp op, size_t count,
                          bool in_place) {
  const int n = comm.world_size();
  std::vector<T> in(count);
  std::vector<T> out(count, FromInt<T>(99));
  for (size_t i = 0; i < count; ++i) in[i] = Value<T>(comm.rank(), i, op);
  const std::vector<T> original = in;
  absl::Status s = in_place ? comm.AllReduce(absl::MakeSpan(in), op)
                            : comm.AllReduce(in.data(), out.data(), count,
                                             DataTypeOf<T>(), op);
  const std::string what =
      absl::StrCat("AllReduce(", count, ", ", ReduceOpName(op),
                   in_place ? ", in place)" : ")");
  if (!s.ok())
    return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
  const std::vector<T>& result = in_place ? in : out;
  for (size_t i = 0; i < count; ++i) {
    const T want = Expected<T>(n, i, op);
    if (!Same(result[i], want)) return Mismatch(comm, what, i, result[i], want);
    if (!in_place && !Same(in[i], original[i])) {
      return Mismatch(comm, what + " changed its input", i, in[i], original[i]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckAllReduce(Communicator& comm) {
  return ForEachType([&](auto zero) -> absl::Status {
    using T = decltype(zero);
    for (ReduceOp op : kOps) {
      // 1 element (fewer than ranks) and 1001 (not a multiple of any world
      // size), in place and out of place.
      for (size_t count : {size_t{1}, size_t{1001}}) {
        MUSTER_CHECK_OK(AllReduceOne<T>(comm, op, count, true));
        MUSTER_CHECK_OK(AllReduceOne<T>(comm, op, count, false));
      }
    }
    // Between the sync mesh's limit (128 KB) and 1 MB: a kept algorithm on
    // the usual mesh.
    MUSTER_CHECK_OK(AllReduceOne<T>(comm, ReduceOp::kMax,
                                    (300 << 10) / sizeof(T) + 3, true));
    // Above 1 MB and above Gloo's 1 MiB segment: the option-based algorithms,
    // several segments per rank.
    MUSTER_CHECK_OK(AllReduceOne<T>(comm, ReduceOp::kSum,
                                    (3 << 20) / sizeof(T) + 7, false));
    return absl::OkStatus();
  });
}

absl::Status CheckReduce(Communicator& comm) {
  const int n = comm.world_size();
  auto one = [&](auto zero, ReduceOp op, int root) -> absl::Status {
    using T = decltype(zero);
    const size_t count = 37;
    std::vector<T> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = Value<T>(comm.rank(), i, op);
    const std::vector<T> original = in;
    std::vector<T> out(count, FromInt<T>(99));
    const bool is_root = comm.rank() == root;
    MUSTER_CHECK_OK(comm.Reduce(in.data(), is_root ? out.data() : nullptr,
                                count, DataTypeOf<T>(), op, root));
    const std::string what =
        absl::StrCat("Reduce(", ReduceOpName(op), ", root ", root, ")");
    for (size_t i = 0; i < count; ++i) {
      if (!Same(in[i], original[i])) {
        return Mismatch(comm, what + " changed its input", i, in[i],
                        original[i]);
      }
      if (is_root && !Same(out[i], Expected<T>(n, i, op))) {
        return Mismatch(comm, what, i, out[i], Expected<T>(n, i, op));
      }
    }
    return absl::OkStatus();
  };
  for (int root = 0; root < n; ++root) {
    MUSTER_CHECK_OK(ForEachType([&](auto zero) -> absl::Status {
      MUSTER_CHECK_OK(one(zero, ReduceOp::kSum, root));
      return one(zero, ReduceOp::kAvg, root);
    }));
    for (ReduceOp op : kOps) MUSTER_CHECK_OK(one(float{}, op, root));
  }
  // In place at the root.
  std::vector<int32_t> data = {comm.rank() + 1, 2};
  MUSTER_CHECK_OK(comm.Reduce(data.data(), data.data(), 2, DataType::kInt32,
                              ReduceOp::kSum, 0));
  if (comm.rank() == 0 && (data[0] != n * (n + 1) / 2 || data[1] != 2 * n)) {
    return Mismatch(comm, "Reduce in place", 0, data[0], n * (n + 1) / 2);
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcast(Communicator& comm) {
  return ForEachType([&](auto zero) -> absl::Status {
    using T = decltype(zero);
    for (int root = 0; root < comm.world_size(); ++root) {
      const size_t count = 1 + 17 * root;
      std::vector<T> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = Tagged<T>(comm.rank(), i);
      MUSTER_CHECK_OK(comm.Broadcast(absl::MakeSpan(data), root));
      for (size_t i = 0; i < count; ++i) {
        if (!Same(data[i], Tagged<T>(root, i))) {
          return Mismatch(comm, absl::StrCat("Broadcast(root ", root, ")"), i,
                          data[i], Tagged<T>(root, i));
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status CheckGathers(Communicator& comm) {
  const int n = comm.world_size();
  const int me = comm.rank();
  return ForEachType([&](auto zero) -> absl::Status {
    using T = decltype(zero);
    const DataType dt = DataTypeOf<T>();
    const size_t count = 5;
    std::vector<T> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = Tagged<T>(me, i);
    auto check_all = [&](const std::vector<T>& out,
                         absl::string_view what) -> absl::Status {
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) {
          if (!Same(out[r * count + i], Tagged<T>(r, i))) {
            return Mismatch(comm, what, r * count + i, out[r * count + i],
                            Tagged<T>(r, i));
          }
        }
      }
      return absl::OkStatus();
    };
    // AllGather, out of place and in place.
    std::vector<T> out(count * n, FromInt<T>(99));
    MUSTER_CHECK_OK(
        comm.AllGather(absl::Span<const T>(in), absl::MakeSpan(out)));
    MUSTER_CHECK_OK(check_all(out, "AllGather"));
    std::vector<T> inplace(count * n, FromInt<T>(99));
    std::copy(in.begin(), in.end(), inplace.begin() + me * count);
    MUSTER_CHECK_OK(
        comm.AllGather(inplace.data() + me * count, inplace.data(), count, dt));
    MUSTER_CHECK_OK(check_all(inplace, "AllGather in place"));

    // AllGatherV: rank r sends (r + 2) % 3 elements (some send none).
    std::vector<size_t> counts(n);
    for (int r = 0; r < n; ++r) counts[r] = (r + 2) % 3;
    const size_t total =
        std::accumulate(counts.begin(), counts.end(), size_t{0});
    std::vector<T> vin(counts[me]);
    for (size_t i = 0; i < vin.size(); ++i) vin[i] = Tagged<T>(me, i);
    std::vector<T> vout(std::max<size_t>(total, 1), FromInt<T>(99));
    MUSTER_CHECK_OK(comm.AllGatherV(vin.data(), vout.data(), counts, dt));
    size_t at = 0;
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < counts[r]; ++i, ++at) {
        if (!Same(vout[at], Tagged<T>(r, i))) {
          return Mismatch(comm, "AllGatherV", at, vout[at], Tagged<T>(r, i));
        }
      }
    }

    for (int root = 0; root < n; ++root) {
      // Gather (in place at the root on odd roots).
      std::vector<T> g(count * n, FromInt<T>(99));
      const bool in_place = me == root && root % 2 == 1;
      if (in_place) std::copy(in.begin(), in.end(), g.begin() + me * count);
      MUSTER_CHECK_OK(comm.Gather(in_place ? g.data() + me * count : in.data(),
                                  me == root ? g.data() : nullptr, count, dt,
                                  root));
      if (me == root) {
        MUSTER_CHECK_OK(check_all(g, absl::StrCat("Gather(root ", root, ")")));
      }
      // Scatter: block r of the root's input is Tagged(r, .).
      std::vector<T> src(count * n);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) src[r * count + i] = Tagged<T>(r, i);
      }
      std::vector<T> dst(count, FromInt<T>(99));
      MUSTER_CHECK_OK(comm.Scatter(me == root ? src.data() : nullptr,
                                   dst.data(), count, dt, root));
      for (size_t i = 0; i < count; ++i) {
        if (!Same(dst[i], Tagged<T>(me, i))) {
          return Mismatch(comm, absl::StrCat("Scatter(root ", root, ")"), i,
                          dst[i], Tagged<T>(me, i));
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status CheckReduceScatterAndAllToAll(Communicator& comm) {
  const int n = comm.world_size();
  const int me = comm.rank();
  return ForEachType([&](auto zero) -> absl::Status {
    using T = decltype(zero);
    const DataType dt = DataTypeOf<T>();
    for (ReduceOp op : kOps) {
      for (bool in_place : {false, true}) {
        const size_t count = 9;
        std::vector<T> in(count * n);
        for (size_t i = 0; i < in.size(); ++i) in[i] = Value<T>(me, i, op);
        std::vector<T> out(count, FromInt<T>(99));
        T* dst = in_place ? in.data() + me * count : out.data();
        MUSTER_CHECK_OK(comm.ReduceScatter(in.data(), dst, count, dt, op));
        const std::string what = absl::StrCat(
            "ReduceScatter(", ReduceOpName(op), in_place ? ", in place)" : ")");
        for (size_t i = 0; i < count; ++i) {
          const T want = Expected<T>(n, me * count + i, op);
          if (!Same(dst[i], want)) return Mismatch(comm, what, i, dst[i], want);
        }
      }
    }
    // AllToAll: block j of rank r's input is Tagged(r * n + j, .); rank j's
    // output block r must be that.
    const size_t count = 3;
    std::vector<T> in(count * n);
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < count; ++i)
        in[j * count + i] = Tagged<T>(me * n + j, i);
    }
    std::vector<T> out(count * n, FromInt<T>(99));
    MUSTER_CHECK_OK(comm.AllToAll(in.data(), out.data(), count, dt));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        const T want = Tagged<T>(r * n + me, i);
        if (!Same(out[r * count + i], want)) {
          return Mismatch(comm, "AllToAll", r * count + i, out[r * count + i],
                          want);
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status CheckPointToPointAndAsync(Communicator& comm) {
  const int n = comm.world_size();
  const int me = comm.rank();
  if (n > 1) {
    const int right = (me + 1) % n;
    const int left = (me + n - 1) % n;
    // Asynchronous: every rank posts its send before its receive — two tags,
    // received in the opposite order of sending.
    std::vector<int64_t> a(100, me), b(50, me * 10);
    std::vector<int64_t> ra(100, -1), rb(50, -1);
    auto sa = comm.StartSend(a.data(), a.size(), DataType::kInt64, right, 7);
    auto sb = comm.StartSend(b.data(), b.size(), DataType::kInt64, right, 8);
    if (!sa.ok()) return sa.status();
    if (!sb.ok()) return sb.status();
    auto wb = comm.StartRecv(rb.data(), rb.size(), DataType::kInt64, left, 8);
    auto wa = comm.StartRecv(ra.data(), ra.size(), DataType::kInt64, left, 7);
    if (!wa.ok()) return wa.status();
    if (!wb.ok()) return wb.status();
    MUSTER_CHECK_OK((*wa)->Wait(absl::Seconds(30)));
    MUSTER_CHECK_OK((*wb)->Wait(absl::Seconds(30)));
    MUSTER_CHECK_OK((*sa)->Wait(absl::Seconds(30)));
    MUSTER_CHECK_OK((*sb)->Wait(absl::Seconds(30)));
    for (size_t i = 0; i < ra.size(); ++i) {
      if (ra[i] != left)
        return Mismatch(comm, "Recv tag 7", i, ra[i], int64_t{left});
    }
    for (size_t i = 0; i < rb.size(); ++i) {
      if (rb[i] != left * 10) {
        return Mismatch(comm, "Recv tag 8", i, rb[i], int64_t{left * 10});
      }
    }
    // Blocking: even ranks send first, odd ranks receive first.
    float x = static_cast<float>(me) + 0.5f;
    float y = -1;
    // (A Send returns once the peer has posted the matching Recv, so an odd
    // ring, where ranks n-1 and 0 both send first, still completes.)
    if (me % 2 == 0) {
      MUSTER_CHECK_OK(comm.Send(&x, 1, DataType::kFloat32, right));
      MUSTER_CHECK_OK(comm.Recv(&y, 1, DataType::kFloat32, left));
    } else {
      MUSTER_CHECK_OK(comm.Recv(&y, 1, DataType::kFloat32, left));
      MUSTER_CHECK_OK(comm.Send(&x, 1, DataType::kFloat32, right));
    }
    if (y != static_cast<float>(left) + 0.5f) {
      return Mismatch(comm, "blocking Recv", 0, y,
                      static_cast<float>(left) + 0.5f);
    }
  }
  // Asynchronous collectives, three queued, then waited in reverse order.
  std::vector<int32_t> d1(10, 1), d2(1000, 2), d3(3, me);
  auto w1 = comm.StartAllReduce(d1.data(), d1.data(), d1.size(),
                                DataType::kInt32, ReduceOp::kSum);
  auto w2 = comm.StartAllReduce(d2.data(), d2.data(), d2.size(),
                                DataType::kInt32, ReduceOp::kMax);
  auto w3 = comm.StartBroadcast(d3.data(), d3.size(), DataType::kInt32, n - 1);
  auto wbar = comm.StartBarrier();
  if (!w1.ok()) return w1.status();
  if (!w2.ok()) return w2.status();
  if (!w3.ok()) return w3.status();
  if (!wbar.ok()) return wbar.status();
  MUSTER_CHECK_OK((*wbar)->Wait(absl::Seconds(30)));
  if (!(*w1)->Done() || !(*w2)->Done() || !(*w3)->Done()) {
    return absl::InternalError(
        "asynchronous collectives finished out of order");
  }
  MUSTER_CHECK_OK((*w3)->Wait());
  MUSTER_CHECK_OK((*w2)->Wait());
  MUSTER_CHECK_OK((*w1)->Wait());
  if (d1[9] != n || d2[999] != 2 || d3[2] != n - 1) {
    return absl::InternalError(absl::StrCat("rank ", me,
                                            ": asynchronous results ", d1[9],
                                            " ", d2[999], " ", d3[2]));
  }
  return absl::OkStatus();
}

absl::Status CheckEverything(Communicator& comm) {
  MUSTER_CHECK_OK(CheckAllReduce(comm));
  MUSTER_CHECK_OK(CheckReduce(comm));
  MUSTER_CHECK_OK(CheckBroadcast(comm));
  MUSTER_CHECK_OK(CheckGathers(comm));
  MUSTER_CHECK_OK(CheckReduceScatterAndAllToAll(comm));
  MUSTER_CHECK_OK(CheckPointToPointAndAsync(comm));
  return comm.Barrier();
}

}  // namespace muster::comm::testing
