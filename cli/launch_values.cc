#include "cli/launch_values.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "muster/platform/launch_os.h"

namespace muster::cli {

namespace os = platform::os;

absl::Status ParseNnodes(const Given& g, int* min_nodes, int* max_nodes) {
  static constexpr char kForm[] =
      "expected N or MIN:MAX, e.g. --nnodes=2 or --nnodes=1:4";
  std::vector<std::string> parts = absl::StrSplit(g.value, ':');
  if (parts.size() > 2) return BadValue(g, kForm);
  std::optional<int> lo = ParseInt(parts[0]);
  std::optional<int> hi = parts.size() == 2 ? ParseInt(parts[1]) : lo;
  if (!lo.has_value() || !hi.has_value()) return BadValue(g, kForm);
  if (*lo < 1) {
    return BadValue(g, absl::StrCat("a job needs at least 1 node; ", kForm));
  }
  if (*hi < *lo) {
    return BadValue(
        g, absl::StrCat("MAX (", *hi, ") is below MIN (", *lo,
                        "); write MIN:MAX with MIN <= MAX, e.g. --nnodes=", *hi,
                        ":", *lo));
  }
  *min_nodes = *lo;
  *max_nodes = *hi;
  return absl::OkStatus();
}

absl::StatusOr<int> ParseNproc(const Given& g,
                               const std::function<HostResources()>& host) {
  std::string word = absl::AsciiStrToLower(absl::StripAsciiWhitespace(g.value));
  static constexpr char kForm[] =
      "expected a number, \"auto\", \"cpu\" or \"gpu\"";
  if (word == "auto" || word == "cpu" || word == "gpu") {
    HostResources h = host();
    if (word == "cpu") return std::max(1, h.cpus);
    if (h.gpus > 0) return h.gpus;
    if (word == "auto") return std::max(1, h.cpus);
    return BadValue(
        g, absl::StrCat("no NVIDIA GPU found (", h.gpu_source,
                        "); give a number of workers, \"cpu\" or \"auto\""));
  }
  std::optional<int> n = ParseInt(word);
  if (!n.has_value()) return BadValue(g, kForm);
  if (*n < 1)
    return BadValue(g, absl::StrCat("at least 1 worker per node; ", kForm));
  if (*n > kMaxNprocPerNode) {
    return BadValue(
        g, absl::StrCat("at most ", kMaxNprocPerNode,
                        " workers per node; start more agents (nodes) for a "
                        "bigger job"));
  }
  return *n;
}

absl::StatusOr<std::map<int, int>> ParseStdMap(const Given& g) {
  static constexpr char kForm[] =
      "expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both) for every local "
      "rank, or LOCAL_RANK:VALUE pairs, e.g. 0:3,1:1";
  std::map<int, int> out;
  absl::string_view text = absl::StripAsciiWhitespace(g.value);
  if (text.find(':') == absl::string_view::npos) {
    std::optional<int> v = ParseInt(text);
    if (!v.has_value() || *v < 0 || *v > 3) return BadValue(g, kForm);
    if (*v != 0) out[-1] = *v;
    return out;
  }
  for (absl::string_view item :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
    if (kv.size() != 2) return BadValue(g, kForm);
    std::optional<int> rank = ParseInt(kv[0]);
    std::optional<int> v = ParseInt(kv[1]);
    if (!rank.has_value() || *rank < 0 || !v.has_value() || *v < 0 || *v > 3) {
      return BadValue(g, kForm);
    }
    if (*v != 0) {
      out[*rank] = *v;
    } else {
      out.erase(*rank);
    }
  }
  return out;
}

absl::StatusOr<std::set<int>> ParseRankList(const Given& g) {
  std::set<int> out;
  for (absl::string_view item :
       absl::StrSplit(g.value, ',', absl::SkipWhitespace())) {
    std::optional<int> r = ParseInt(item);
    if (!r.has_value() || *r < 0) {
      return BadValue(
          g, "expected local ranks separated by commas, e.g. 0 or 0,2");
    }
    out.insert(*r);
  }
  return out;
}

std::vector<std::string> ParseFilterList(absl::string_view text) {
  std::vector<std::string> out;
  std::string item;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      item.push_back(text[i]);
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item.push_back(',');
      ++i;
    } else {
      if (!item.empty()) out.push_back(std::move(item));
      item.clear();
    }
  }
  if (!item.empty()) out.push_back(std::move(item));
  return out;
}

absl::StatusOr<std::vector<int>> ParseSignalList(const Given& g) {
  std::vector<int> out;
  for (absl::string_view item :
       absl::StrSplit(g.value, ',', absl::SkipWhitespace())) {
    std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(item));
    int sig = 0;
    if (!absl::SimpleAtoi(name, &sig)) {
      absl::string_view bare = name;
      absl::ConsumePrefix(&bare, "SIG");
      sig = os::SignalNumber(bare).value_or(0);
    }
    if (!os::IsSignalNumber(sig)) {
      return BadValue(g, absl::StrCat("unknown signal '", item,
                                      "'; write names such as "
                                      "SIGTERM,SIGINT,SIGUSR1 or numbers"));
    }
    if (os::IsUncatchableSignal(sig)) {
      return BadValue(g, absl::StrCat(item,
                                      " cannot be caught by any process; "
                                      "leave it out"));
    }
    if (std::find(out.begin(), out.end(), sig) == out.end()) out.push_back(sig);
  }
  if (out.empty()) {
    return BadValue(g, "expected at least one signal, e.g. SIGTERM,SIGINT");
  }
  return out;
}

}  // namespace muster::cli
