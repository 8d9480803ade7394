#include "tests/testing/linearizability.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace muster::testing {
namespace {

using Kind = KvOp::Kind;
using Outcome = KvOp::Outcome;
using Verdict = LinearizabilityResult::Verdict;

// The model state of one key: an id of an interned value, or kAbsent.
constexpr int32_t kAbsent = -1;

// Beyond this the cache's bitsets would take more memory than a test machine
// should give a checker; the search gives up as if out of time.
constexpr size_t kMaxCacheWords = size_t{1} << 28;  // 2 GiB

// The time is read once per this many search steps: absl::Now() costs as
// much as a few steps.
constexpr int64_t kStepsPerClockRead = 512;

// A history longer than this is shown in an explanation only around the point
// where the search got stuck.
constexpr size_t kMaxOpsShown = 100;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string Quote(absl::string_view s) {
  constexpr size_t kMaxShown = 64;
  if (s.size() <= kMaxShown)
    return absl::StrCat("\"", absl::CHexEscape(s), "\"");
  return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMaxShown)), "\"...(",
                      s.size(), " bytes)");
}

// The values one key takes, interned so that the model's state is an int and
// the search compares and hashes ints, not strings.
class Values {
 public:
  Values() : empty_(Intern("")) {}

  int32_t Intern(absl::string_view text) {
    auto [it, inserted] =
        ids_.try_emplace(text, static_cast<int32_t>(texts_.size()));
    if (inserted) {
      texts_.emplace_back(text);
      integer_.push_back(kUnparsed);
      ints_.push_back(0);
    }
    return it->second;
  }

  int32_t empty() const { return empty_; }

  std::string Describe(int32_t id) const {
    return id == kAbsent ? "absent" : Quote(texts_[id]);
  }

  // The integer Add starts from, as KvStore::Add reads it: absent and "" count
  // 0; false when the value is not an integer (Add answers INVALID_ARGUMENT).
  bool AsInteger(int32_t id, int64_t* out) {
    if (id == kAbsent) {
      *out = 0;
      return true;
    }
    if (integer_[id] == kUnparsed) {
      const std::string& text = texts_[id];
      int64_t v = 0;
      const bool ok = text.empty() || absl::SimpleAtoi(text, &v);
      integer_[id] = ok ? kInteger : kNotInteger;
      ints_[id] = v;
    }
    *out = ints_[id];
    return integer_[id] == kInteger;
  }

 private:
  enum : int8_t { kUnparsed, kInteger, kNotInteger };
  absl::flat_hash_map<std::string, int32_t> ids_;
  std::vector<std::string> texts_;
  std::vector<int8_t> integer_;
  std::vector<int64_t> ints_;
  int32_t empty_;
};

// An op of one key, with its strings interned.
struct ModelOp {
  Kind kind = Kind::kGet;
  bool unknown = false;
  bool found = false;
  bool expected_empty = false;
  bool result_valid = true;  // kOk kAdd: the result is a decimal integer
  int32_t value = kAbsent;   // kSet: value; kCompareSet: desired
  int32_t expected = kAbsent;
  int32_t result = kAbsent;  // kGet (found), kCompareSet, kAdd (the text)
  int64_t delta = 0;
  int64_t add_result = 0;
  int index = 0;  // in the history
  // Its number among the acknowledged ops, or among the unknown ones.
  int bit = 0;
  // A random 64-bit id (acknowledged ops), whose XOR hashes a set of them.
  uint64_t zobrist = 0;
  // The unknown op just before it in invocation order with the same effect.
  int twin = -1;
};

// The Store's sequential semantics for one key (KvStore::Set, Get, Add,
// CompareSet, Delete). Returns whether `op` may take effect in `state` with
// the answer it got (any answer for an unknown op), and the state after it.
bool Step(Values& values, int32_t state, const ModelOp& op, int32_t* next) {
  switch (op.kind) {
    case Kind::kSet:
      *next = op.value;
      return true;
    case Kind::kGet:
      *next = state;
      return op.found ? state == op.result : state == kAbsent;
    case Kind::kAdd: {
      int64_t current = 0;
      // A value that is not an integer refuses the Add: a kOk Add cannot be
      // here, and an unknown one took no effect (it is optional anyway).
      if (!values.AsInteger(state, &current)) return false;
      // Wraps instead of overflowing: the checker must not have undefined
      // behaviour whatever the history holds.
      const int64_t sum = static_cast<int64_t>(static_cast<uint64_t>(current) +
                                               static_cast<uint64_t>(op.delta));
      if (op.unknown) {
        *next = values.Intern(absl::StrCat(sum));
        return true;
      }
      *next = op.result;
      return op.result_valid && sum == op.add_result;
    }
    case Kind::kCompareSet: {
      const bool swap =
          state == kAbsent ? op.expected_empty : state == op.expected;
      *next = swap ? op.value : state;
      if (op.unknown) return true;
      // Not swapping answers the current value, "" when absent.
      const int32_t answer = swap               ? op.value
                             : state != kAbsent ? state
                                                : values.empty();
      return answer == op.result;
    }
    case Kind::kDelete:
      *next = kAbsent;
      return op.unknown || op.found == (state != kAbsent);
  }
  return false;
}

// The search's memory of the nodes it visited: (acknowledged ops linearized,
// state) as in Porcupine's cache, each with the sets of unknown ops that were
// linearized on the way there. A node is not visited again, nor one that
// only differs by more unknown ops used up: unknown ops are optional, so a
// node that used fewer can do all it can (the dominance that keeps an unknown
// write that was applied and then overwritten from doubling the search).
// Bitsets live in arenas, chained by hash: a lookup copies nothing.
class Cache {
 public:
  Cache(size_t known_words, size_t unknown_words)
      : known_words_(known_words), unknown_words_(unknown_words) {}

  // Records the node; false when it, or a node it is dominated by, was there.
  bool Visit(uint64_t hash, const std::vector<uint64_t>& known, int32_t state,
             const std::vector<uint64_t>& unknown) {
    auto [it, inserted] = heads_.try_emplace(hash, -1);
    int64_t entry = -1;
    for (int64_t e = it->second; e >= 0; e = chain_[e]) {
      if (states_[e] == state &&
          std::memcmp(known_.data() + e * known_words_, known.data(),
                      known_words_ * sizeof(uint64_t)) == 0) {
        entry = e;
        break;
      }
    }
    if (entry < 0) {
      entry = static_cast<int64_t>(states_.size());
      chain_.push_back(it->second);
      it->second = entry;
      states_.push_back(state);
      known_.insert(known_.end(), known.begin(), known.end());
      used_head_.push_back(-1);
    } else {
      for (int64_t r = used_head_[entry]; r >= 0; r = used_next_[r]) {
        if (Subset(used_.data() + r * unknown_words_, unknown)) return false;
      }
    }
    used_next_.push_back(used_head_[entry]);
    used_head_[entry] = static_cast<int64_t>(used_next_.size()) - 1;
    used_.insert(used_.end(), unknown.begin(), unknown.end());
    return true;
  }

  bool Full() const { return known_.size() + used_.size() >= kMaxCacheWords; }

 private:
  bool Subset(const uint64_t* small, const std::vector<uint64_t>& big) const {
    for (size_t w = 0; w < unknown_words_; ++w) {
      if ((small[w] & ~big[w]) != 0) return false;
    }
    return true;
  }

  size_t known_words_, unknown_words_;
  absl::flat_hash_map<uint64_t, int64_t> heads_;
  // Per entry: the next entry of its hash, its state, its known bitset, its
  // first set of unknown ops used.
  std::vector<int64_t> chain_;
  std::vector<int32_t> states_;
  std::vector<uint64_t> known_;
  std::vector<int64_t> used_head_;
  // Per set of unknown ops used: the next of its entry, its bitset.
  std::vector<int64_t> used_next_;
  std::vector<uint64_t> used_;
};

struct KeyVerdict {
  Verdict verdict = Verdict::kLinearizable;
  std::string explanation;
};

// The ops of one key and the search over them.
class KeySearch {
 public:
  KeySearch(const std::vector<KvOp>& history, std::vector<int> indices)
      : history_(history), indices_(std::move(indices)) {}

  KeyVerdict Run(absl::Time deadline) {
    Prepare();
    const int n = static_cast<int>(ops_.size());
    const int head = 0, tail = 2 * n + 1;
    std::vector<uint64_t> known((known_count_ + 63) / 64, 0);
    std::vector<uint64_t> unknown((unknown_count_ + 63) / 64, 0);
    Cache cache(known.size(), unknown.size());
    auto flip = [&](const ModelOp& op) {
      std::vector<uint64_t>& bits = op.unknown ? unknown : known;
      bits[op.bit / 64] ^= uint64_t{1} << (op.bit % 64);
      if (!op.unknown) known_hash_ ^= op.zobrist;
    };
    auto linearized = [&](const ModelOp& op) {
      const std::vector<uint64_t>& bits = op.unknown ? unknown : known;
      return (bits[op.bit / 64] >> (op.bit % 64) & 1) != 0;
    };
    std::vector<Frame> calls;
    int32_t state = kAbsent;
    int64_t steps = 0;
    int node = next_[head];
    // At each node the acknowledged ops are tried first, then the unknown
    // ones: the nodes that use fewer unknown ops are visited first and
    // dominate those that use more (see Cache).
    bool unknown_pass = false;
    while (true) {
      if (++steps % kStepsPerClockRead == 0 &&
          (absl::Now() >= deadline || cache.Full())) {
        KeepLongest(calls, state, -1);
        return {Verdict::kTimedOut, Explain(Verdict::kTimedOut)};
      }
      if (node == tail) break;  // nothing left: every op linearized
      const ModelOp& op = ops_[op_of_[node]];
      if (is_call_[node]) {
        int32_t after = kAbsent;
        if (op.unknown == unknown_pass && Step(values_, state, op, &after) &&
            MayFollow(calls, node, state, after, linearized)) {
          flip(op);
          // A node reached by an unknown op is not cached: what may follow
          // it depends on that op (MayFollow), not only on the node.
          if (op.unknown || cache.Visit(known_hash_ ^ SplitMix64(after), known,
                                        after, unknown)) {
            calls.push_back({node, state, unknown_pass});
            if (!op.unknown) ++known_depth_;
            state = after;
            Lift(node);
            node = next_[head];
            unknown_pass = false;
            continue;
          }
          flip(op);
        }
        node = next_[node];
        continue;
      }
      // A return: its op must take effect before anything after it. Returns
      // of unknown ops sort last, at +infinity, so reaching one means every
      // acknowledged op is linearized; unknown ops left never took effect.
      if (op.unknown) break;
      if (!unknown_pass) {
        unknown_pass = true;
        node = next_[head];
        continue;
      }
      KeepLongest(calls, state, node);
      if (calls.empty()) {
        return {Verdict::kNotLinearizable, Explain(Verdict::kNotLinearizable)};
      }
      const Frame top = calls.back();
      calls.pop_back();
      flip(ops_[op_of_[top.call]]);
      if (!ops_[op_of_[top.call]].unknown) --known_depth_;
      state = top.state;
      Unlift(top.call);
      node = next_[top.call];
      unknown_pass = top.unknown_pass;
    }
    return {};
  }

  int64_t size() const { return static_cast<int64_t>(indices_.size()); }

 private:
  // A linearized call and the state before it.
  struct Frame {
    int call;
    int32_t state;
    bool unknown_pass;
  };

  void Prepare() {
    const int n = static_cast<int>(indices_.size());
    ops_.reserve(n);
    for (int i = 0; i < n; ++i) {
      const KvOp& h = history_[indices_[i]];
      ModelOp op;
      op.kind = h.kind;
      op.unknown = h.outcome == Outcome::kUnknown;
      op.found = h.found;
      op.index = indices_[i];
      op.delta = h.delta;
      switch (h.kind) {
        case Kind::kSet:
          op.value = values_.Intern(h.value);
          break;
        case Kind::kGet:
          if (h.found) op.result = values_.Intern(h.result);
          break;
        case Kind::kAdd:
          if (!op.unknown) {
            op.result_valid = absl::SimpleAtoi(h.result, &op.add_result);
            // KvStore stores the sum as absl::StrCat writes it.
            op.result = values_.Intern(absl::StrCat(op.add_result));
          }
          break;
        case Kind::kCompareSet:
          op.value = values_.Intern(h.value);
          op.expected = values_.Intern(h.expected);
          op.expected_empty = h.expected.empty();
          if (!op.unknown) op.result = values_.Intern(h.result);
          break;
        case Kind::kDelete:
          break;
      }
      op.bit = op.unknown ? unknown_count_++ : known_count_++;
      op.zobrist = SplitMix64(0x5eedULL + static_cast<uint64_t>(i));
      ops_.push_back(op);
    }

    // Calls and returns sorted by time; at one instant calls first, so that
    // ops touching at an instant count as concurrent (the lenient reading of
    // a clock whose resolution hides which came first). Returns of unknown
    // ops are at +infinity, after every acknowledged op's.
    struct Event {
      absl::Time time;
      bool is_return;
      bool unknown;
      int op;
    };
    std::vector<Event> events;
    events.reserve(2 * n);
    for (int i = 0; i < n; ++i) {
      const KvOp& h = history_[indices_[i]];
      events.push_back({h.invoked, false, ops_[i].unknown, i});
      events.push_back({ops_[i].unknown ? absl::InfiniteFuture()
                                        : std::max(h.returned, h.invoked),
                        true, ops_[i].unknown, i});
    }
    std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
      return std::tie(a.time, a.is_return, a.unknown, a.op) <
             std::tie(b.time, b.is_return, b.unknown, b.op);
    });
    // Nodes: 0 the head, 1..2n the events in order, 2n+1 the tail.
    next_.resize(2 * n + 2);
    prev_.resize(2 * n + 2);
    op_of_.assign(2 * n + 2, 0);
    is_call_.assign(2 * n + 2, false);
    match_.assign(2 * n + 2, 0);
    std::vector<int> call_node(n, 0);
    absl::flat_hash_map<std::tuple<Kind, int32_t, int32_t, int64_t>, int>
        last_alike;
    for (int e = 0; e < 2 * n; ++e) {
      const int node = e + 1;
      op_of_[node] = events[e].op;
      is_call_[node] = !events[e].is_return;
      if (is_call_[node]) {
        call_node[events[e].op] = node;
        ModelOp& op = ops_[events[e].op];
        if (op.unknown) {
          auto [it, inserted] = last_alike.try_emplace(
              std::make_tuple(op.kind, op.value, op.expected, op.delta),
              events[e].op);
          if (!inserted) {
            op.twin = it->second;
            it->second = events[e].op;
          }
        }
      } else {
        match_[call_node[events[e].op]] = node;
      }
    }
    for (int node = 0; node <= 2 * n + 1; ++node) {
      next_[node] = node + 1;
      prev_[node] = node - 1;
    }
  }

  // Whether the op at call node `node` may be linearized next, taking the
  // key from `state` to `after`. The search only builds linearizations in a
  // normal form, which every linearizable history has one of:
  // - an unknown op that changes nothing is left out (it may never apply);
  // - of identical unknown ops, the earliest invoked is used first;
  // - an unknown op is left out when the op after it does the same without
  //   it (a write overwritten);
  // - an unknown op is put off as long as it commutes with the op after it
  //   (put off past the last acknowledged op, it is left out), and of two
  //   unknown ops that commute, the earlier invoked goes first.
  // So an unknown op is only tried where the next op sees its effect: the
  // ones a nemesis leaves pending forever no longer multiply the search.
  template <typename Linearized>
  bool MayFollow(const std::vector<Frame>& calls, int node, int32_t state,
                 int32_t after, const Linearized& linearized) {
    const ModelOp& op = ops_[op_of_[node]];
    if (op.unknown) {
      if (after == state) return false;
      if (op.twin >= 0 && !linearized(ops_[op.twin])) return false;
    }
    if (calls.empty()) return true;
    const Frame& last = calls.back();
    const ModelOp& previous = ops_[op_of_[last.call]];
    if (!previous.unknown) return true;
    // Taken alone, does the op leave the same state with the same answer?
    // Then the unknown op before it can be left out (e.g. a write that the op
    // overwrites).
    int32_t alone = kAbsent;
    if (!Step(values_, last.state, op, &alone)) return true;
    if (alone == after) return false;
    if (op.unknown && node > last.call) return true;
    // Taken first, does it leave the same state with the same answer?
    int32_t swapped = kAbsent;
    if (!Step(values_, alone, previous, &swapped)) return true;
    return swapped != after;
  }

  // Takes a call and its return out of the list (dancing links: their own
  // pointers stay, so that Unlift puts them back in place).
  void Lift(int call) {
    const int ret = match_[call];
    next_[prev_[call]] = next_[call];
    prev_[next_[call]] = prev_[call];
    next_[prev_[ret]] = next_[ret];
    prev_[next_[ret]] = prev_[ret];
  }

  void Unlift(int call) {
    const int ret = match_[call];
    next_[prev_[ret]] = ret;
    prev_[next_[ret]] = ret;
    next_[prev_[call]] = call;
    prev_[next_[call]] = call;
  }

  // Remembers the longest linearizable prefix seen, for the explanation; at
  // node `stuck` (a return, or -1) the search could not get past.
  void KeepLongest(const std::vector<Frame>& calls, int32_t state, int stuck) {
    // Measured in acknowledged ops: a prefix is not longer for using up
    // more unknown ops.
    if (have_longest_ && known_depth_ <= longest_known_) return;
    have_longest_ = true;
    longest_known_ = known_depth_;
    longest_.clear();
    for (const Frame& f : calls) longest_.push_back(op_of_[f.call]);
    longest_state_ = state;
    stuck_op_ = stuck >= 0 ? op_of_[stuck] : -1;
  }

  std::string Explain(Verdict verdict) {
    const int n = static_cast<int>(ops_.size());
    const KvOp& first = history_[indices_.front()];
    absl::Time origin = absl::InfiniteFuture();
    for (int index : indices_)
      origin = std::min(origin, history_[index].invoked);
    std::string out = absl::StrCat(
        "key ", Quote(first.key), ": ",
        verdict == Verdict::kTimedOut ? "search ran out of its budget"
                                      : "not linearizable",
        " (", n, " ops; times from the first invocation, ",
        absl::FormatTime("%Y-%m-%d %H:%M:%E6S UTC", origin,
                         absl::UTCTimeZone()),
        ")\n");

    std::vector<bool> in_prefix(n, false);
    for (int i : longest_) in_prefix[i] = true;
    // Which ops to show: all of a short history; of a long one, the end of
    // the prefix and the ops not in it invoked before the stuck op returned.
    std::vector<int> shown;
    if (static_cast<size_t>(n) <= kMaxOpsShown) {
      for (int i = 0; i < n; ++i) shown.push_back(i);
    } else {
      const size_t tail = std::min<size_t>(longest_.size(), kMaxOpsShown / 3);
      shown.assign(longest_.end() - tail, longest_.end());
      const absl::Time until = stuck_op_ >= 0
                                   ? history_[ops_[stuck_op_].index].returned
                                   : absl::InfiniteFuture();
      for (int i = 0; i < n && shown.size() < kMaxOpsShown; ++i) {
        if (!in_prefix[i] && history_[ops_[i].index].invoked <= until) {
          shown.push_back(i);
        }
      }
      absl::StrAppend(&out, "  (", shown.size(), " of them shown: the last ",
                      tail,
                      " of the prefix below and the ops pending where it "
                      "stops)\n");
    }
    std::sort(shown.begin(), shown.end(), [&](int a, int b) {
      return std::make_pair(history_[ops_[a].index].invoked, ops_[a].index) <
             std::make_pair(history_[ops_[b].index].invoked, ops_[b].index);
    });
    for (int i : shown) {
      absl::StrAppend(&out, "  #", ops_[i].index, " ",
                      DescribeOp(history_[ops_[i].index], origin), "\n");
    }

    std::vector<std::string> prefix;
    const size_t skipped =
        longest_.size() > kMaxOpsShown ? longest_.size() - kMaxOpsShown : 0;
    if (skipped > 0)
      prefix.push_back(absl::StrCat("(", skipped, " ops, then)"));
    for (size_t p = skipped; p < longest_.size(); ++p) {
      prefix.push_back(absl::StrCat("#", ops_[longest_[p]].index));
    }
    absl::StrAppend(&out, "longest linearizable prefix found (",
                    longest_.size(), " of ", n, " ops, ",
                    longest_.size() - longest_known_, " of them unanswered): ",
                    prefix.empty() ? "(none)" : absl::StrJoin(prefix, " "),
                    "\n  leaving the key ",
                    longest_state_ == kAbsent
                        ? "absent"
                        : absl::StrCat("at ", values_.Describe(longest_state_)),
                    "\n");
    if (stuck_op_ >= 0) {
      const KvOp& stuck = history_[ops_[stuck_op_].index];
      absl::StrAppend(
          &out, "then #", ops_[stuck_op_].index, " must take effect by ",
          absl::StrFormat("+%.3fms",
                          absl::ToDoubleMilliseconds(stuck.returned - origin)),
          verdict == Verdict::kTimedOut
              ? ", and the search had not decided whether any order allows it"
              : ", and no order of the ops pending then allows it",
          ": ", DescribeOp(stuck, origin), "\n");
    }
    return out;
  }

  const std::vector<KvOp>& history_;
  std::vector<int> indices_;
  Values values_;
  std::vector<ModelOp> ops_;
  int known_count_ = 0, unknown_count_ = 0;
  uint64_t known_hash_ = 0;  // the XOR of the zobrists of known ops linearized
  std::vector<int> next_, prev_, op_of_, match_;
  std::vector<bool> is_call_;
  int known_depth_ = 0;  // acknowledged ops on the search's path
  bool have_longest_ = false;
  int longest_known_ = 0;
  std::vector<int> longest_;
  int32_t longest_state_ = kAbsent;
  int stuck_op_ = -1;
};

std::string DescribeCall(const KvOp& op) {
  std::string out = absl::StrCat("client ", op.client, " ");
  switch (op.kind) {
    case Kind::kSet:
      absl::StrAppend(&out, "set(", Quote(op.key), ", ", Quote(op.value), ")");
      break;
    case Kind::kGet:
      absl::StrAppend(&out, "get(", Quote(op.key), ")");
      break;
    case Kind::kAdd:
      absl::StrAppend(&out, "add(", Quote(op.key), ", ", op.delta, ")");
      break;
    case Kind::kCompareSet:
      absl::StrAppend(&out, "compare_set(", Quote(op.key), ", expected ",
                      Quote(op.expected), ", desired ", Quote(op.value), ")");
      break;
    case Kind::kDelete:
      absl::StrAppend(&out, "delete(", Quote(op.key), ")");
      break;
  }
  absl::StrAppend(&out, " -> ");
  switch (op.outcome) {
    case Outcome::kUnknown:
      absl::StrAppend(&out, "? (no answer)");
      break;
    case Outcome::kNotApplied:
      absl::StrAppend(&out, "not applied");
      break;
    case Outcome::kOk:
      switch (op.kind) {
        case Kind::kSet:
          absl::StrAppend(&out, "ok");
          break;
        case Kind::kGet:
          absl::StrAppend(&out, op.found ? Quote(op.result) : "absent");
          break;
        case Kind::kAdd:
          absl::StrAppend(&out, op.result);
          break;
        case Kind::kCompareSet:
          absl::StrAppend(&out, Quote(op.result));
          break;
        case Kind::kDelete:
          absl::StrAppend(&out, op.found ? "existed" : "absent");
          break;
      }
      break;
  }
  return out;
}

}  // namespace

std::string DescribeOp(const KvOp& op) {
  auto format = [](absl::Time t) {
    return absl::FormatTime("%H:%M:%E6S", t, absl::UTCTimeZone());
  };
  return absl::StrCat(
      DescribeCall(op), " [", format(op.invoked), ", ",
      op.outcome == Outcome::kUnknown ? "..." : format(op.returned), "]");
}

std::string DescribeOp(const KvOp& op, absl::Time origin) {
  auto format = [origin](absl::Time t) {
    return absl::StrFormat("+%.3fms", absl::ToDoubleMilliseconds(t - origin));
  };
  return absl::StrCat(
      DescribeCall(op), " [", format(op.invoked), ", ",
      op.outcome == Outcome::kUnknown ? "..." : format(op.returned), "]");
}

LinearizabilityResult CheckLinearizable(const std::vector<KvOp>& history,
                                        absl::Duration budget) {
  const absl::Time deadline = absl::Now() + budget;
  LinearizabilityResult result;
  absl::flat_hash_map<std::string, std::vector<int>> by_key;
  for (int i = 0; i < static_cast<int>(history.size()); ++i) {
    const KvOp& op = history[i];
    // A refused op had no effect and an unanswered get saw nothing: neither
    // constrains the order.
    if (op.outcome == Outcome::kNotApplied) continue;
    if (op.outcome == Outcome::kUnknown && op.kind == Kind::kGet) continue;
    by_key[op.key].push_back(i);
  }
  // Small keys first: a violation there is found before a large key can eat
  // the whole budget; ties by name, so that the verdict is deterministic.
  std::vector<std::pair<size_t, std::string>> order;
  order.reserve(by_key.size());
  for (const auto& [key, indices] : by_key) {
    order.emplace_back(indices.size(), key);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [size, key] : order) {
    KeySearch search(history, std::move(by_key[key]));
    KeyVerdict verdict = search.Run(deadline);
    result.keys += 1;
    result.ops += search.size();
    if (verdict.verdict != Verdict::kLinearizable) {
      result.verdict = verdict.verdict;
      result.key = key;
      result.explanation = std::move(verdict.explanation);
      return result;
    }
  }
  return result;
}

}  // namespace muster::testing
