#include "cli/slurm.h"

#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "muster/common/status.h"

namespace muster::cli {
namespace {

using Env = std::map<std::string, std::string>;

absl::Status BadHostlist(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("hostlist \"", text, "\": ", why));
}

// The names one bracket group stands for ("01-04,07" -> 01 02 03 04 07).
absl::StatusOr<std::vector<std::string>> ExpandGroup(absl::string_view text,
                                                     absl::string_view group) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = group.find(',', start);
    absl::string_view range = group.substr(
        start, comma == absl::string_view::npos ? absl::string_view::npos
                                                : comma - start);
    if (range.empty()) {
      return BadHostlist(text, absl::StrCat("empty range in [", group, "]"));
    }
    size_t dash = range.find('-');
    absl::string_view lo = range.substr(0, dash);
    absl::string_view hi =
        dash == absl::string_view::npos ? lo : range.substr(dash + 1);
    for (absl::string_view part : {lo, hi}) {
      if (part.empty()) {
        return BadHostlist(text, absl::StrCat("range \"", range,
                                              "\" needs a number on each "
                                              "side of '-', e.g. [01-04]"));
      }
      for (char c : part) {
        if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
          return BadHostlist(
              text, absl::StrCat("'", std::string(1, c), "' in range \"", range,
                                 "\": a range is numbers, e.g. [01-04,07]"));
        }
      }
      if (part.size() > 18) {
        return BadHostlist(text,
                           absl::StrCat("number ", part, " is too large"));
      }
    }
    uint64_t first = 0, last = 0;
    // Digits only and at most 18 of them: these cannot fail.
    (void)absl::SimpleAtoi(lo, &first);
    (void)absl::SimpleAtoi(hi, &last);
    if (last < first) {
      return BadHostlist(
          text, absl::StrCat("range \"", range, "\" ends below its start"));
    }
    if (last - first >= static_cast<uint64_t>(kMaxHostlistHosts) ||
        out.size() + (last - first + 1) >
            static_cast<uint64_t>(kMaxHostlistHosts)) {
      return BadHostlist(text, absl::StrCat("expands to more than ",
                                            kMaxHostlistHosts, " hosts"));
    }
    // Slurm pads every number to the width of the range's lower bound.
    const int width = static_cast<int>(lo.size());
    for (uint64_t n = first; n <= last; ++n) {
      out.push_back(absl::StrFormat("%0*d", width, n));
    }
    if (comma == absl::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// Expands one name of the list ("gpu[01-02]-ib") into `out`.
absl::Status ExpandName(absl::string_view text, absl::string_view name,
                        std::vector<std::string>* out) {
  if (name.empty()) {
    return BadHostlist(text,
                       "empty host name (two commas in a row, or a "
                       "comma at an end)");
  }
  // The names so far: the cartesian product of the groups seen.
  std::vector<std::string> names = {""};
  size_t i = 0;
  while (i < name.size()) {
    size_t open = name.find_first_of("[]", i);
    absl::string_view literal =
        name.substr(i, open == absl::string_view::npos ? absl::string_view::npos
                                                       : open - i);
    for (std::string& n : names) absl::StrAppend(&n, literal);
    if (open == absl::string_view::npos) break;
    if (name[open] == ']') {
      return BadHostlist(text,
                         absl::StrCat("']' without '[' in \"", name, "\""));
    }
    size_t close = name.find_first_of("[]", open + 1);
    if (close == absl::string_view::npos || name[close] != ']') {
      return BadHostlist(
          text, absl::StrCat("'[' without a matching ']' in \"", name, "\""));
    }
    MUSTER_ASSIGN_OR_RETURN(
        std::vector<std::string> group,
        ExpandGroup(text, name.substr(open + 1, close - open - 1)));
    if (names.size() * group.size() + out->size() >
        static_cast<size_t>(kMaxHostlistHosts)) {
      return BadHostlist(text, absl::StrCat("expands to more than ",
                                            kMaxHostlistHosts, " hosts"));
    }
    std::vector<std::string> product;
    product.reserve(names.size() * group.size());
    for (const std::string& prefix : names) {
      for (const std::string& number : group) {
        product.push_back(absl::StrCat(prefix, number));
      }
    }
    names = std::move(product);
    i = close + 1;
  }
  if (out->size() + names.size() > static_cast<size_t>(kMaxHostlistHosts)) {
    return BadHostlist(text, absl::StrCat("expands to more than ",
                                          kMaxHostlistHosts, " hosts"));
  }
  for (std::string& n : names) out->push_back(std::move(n));
  return absl::OkStatus();
}

// The value of a variable, or "" when it is unset.
std::string Get(const Env& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

absl::Status BadVariable(absl::string_view name, absl::string_view value,
                         absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(name, "=", value, ": ", why));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(
    absl::string_view hostlist) {
  absl::string_view text = absl::StripAsciiWhitespace(hostlist);
  if (text.empty()) return BadHostlist(hostlist, "no host names");
  for (char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      return BadHostlist(hostlist,
                         "white space inside; separate names with commas");
    }
  }
  std::vector<std::string> out;
  // Split at the commas outside brackets.
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size()) {
      if (text[i] == '[') {
        if (++depth > 1) {
          return BadHostlist(hostlist, "'[' inside brackets");
        }
        continue;
      }
      if (text[i] == ']') {
        if (--depth < 0) {
          return BadHostlist(hostlist, "']' without '['");
        }
        continue;
      }
      if (text[i] != ',' || depth > 0) continue;
    } else if (depth > 0) {
      return BadHostlist(hostlist, "'[' without a matching ']'");
    }
    MUSTER_RETURN_IF_ERROR(
        ExpandName(hostlist, text.substr(start, i - start), &out));
    start = i + 1;
  }
  return out;
}

absl::StatusOr<std::optional<SlurmAllocation>> DetectSlurmAllocation(
    const Env& env) {
  SlurmAllocation a;
  a.job_id = Get(env, "SLURM_JOB_ID");
  const std::string nnodes = Get(env, "SLURM_NNODES");
  const std::string node_id = Get(env, "SLURM_NODEID");
  const bool has_nodelist = !Get(env, "SLURM_JOB_NODELIST").empty() ||
                            !Get(env, "SLURM_NODELIST").empty();
  if (a.job_id.empty() || nnodes.empty() || node_id.empty() || !has_nodelist) {
    return std::nullopt;
  }
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(nnodes), &a.nnodes) ||
      a.nnodes < 1) {
    return BadVariable("SLURM_NNODES", nnodes,
                       "expected a number of nodes >= 1");
  }
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(node_id), &a.node_id) ||
      a.node_id < 0) {
    return BadVariable("SLURM_NODEID", node_id, "expected a node index >= 0");
  }
  if (a.node_id >= a.nnodes) {
    return BadVariable("SLURM_NODEID", node_id,
                       absl::StrCat("with SLURM_NNODES=", nnodes,
                                    " node indexes are 0..", a.nnodes - 1));
  }
  // The step's own list first: in `srun -N2` inside a larger allocation,
  // SLURM_NNODES and SLURM_NODEID count the step's nodes, not the job's.
  for (const char* name :
       {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    const std::string list = Get(env, name);
    if (list.empty()) continue;
    absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(list);
    if (!hosts.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", list, ": ", hosts.status().message()));
    }
    a.hosts = *std::move(hosts);
    a.nodelist_source = name;
    break;
  }
  if (static_cast<int>(a.hosts.size()) < a.nnodes) {
    return BadVariable(a.nodelist_source, Get(env, a.nodelist_source.c_str()),
                       absl::StrCat("names ", a.hosts.size(),
                                    " host(s) but SLURM_NNODES=", nnodes));
  }
  return a;
}

absl::StatusOr<std::vector<ImpliedFlag>> SlurmImpliedFlags(
    const Env& env,
    const std::function<const std::string*(absl::string_view)>& given) {
  for (const char* layout :
       {"nnodes", "node-rank", "master-addr", "standalone"}) {
    if (given(layout) != nullptr) return std::vector<ImpliedFlag>{};
  }
  // An endpoint with a host names the server; ":PORT" only moves its port.
  if (const std::string* endpoint = given("rdzv-endpoint");
      endpoint != nullptr &&
      !absl::StartsWith(absl::StripAsciiWhitespace(*endpoint), ":")) {
    return std::vector<ImpliedFlag>{};
  }
  MUSTER_ASSIGN_OR_RETURN(std::optional<SlurmAllocation> a,
                          DetectSlurmAllocation(env));
  if (!a.has_value()) return std::vector<ImpliedFlag>{};
  const std::string local_id = Get(env, "SLURM_LOCALID");
  int local = 0;
  if (!local_id.empty() &&
      (!absl::SimpleAtoi(absl::StripAsciiWhitespace(local_id), &local) ||
       local != 0)) {
    return BadVariable(
        "SLURM_LOCALID", local_id,
        "this step runs several tasks on this node, but muster is one agent "
        "per node that starts --nproc-per-node workers itself: launch it with "
        "srun --ntasks-per-node=1 (or give --nnodes, --node-rank and "
        "--master-addr yourself)");
  }
  std::vector<ImpliedFlag> flags;
  flags.push_back({"nnodes", absl::StrCat(a->nnodes), "SLURM_NNODES"});
  flags.push_back({"node-rank", absl::StrCat(a->node_id), "SLURM_NODEID"});
  if (a->nnodes > 1) {
    flags.push_back({"master-addr", a->hosts.front(),
                     absl::StrCat(a->nodelist_source, " (first host)")});
  }
  if (given("rdzv-id") == nullptr) {
    flags.push_back({"rdzv-id", a->job_id, "SLURM_JOB_ID"});
  }
  return flags;
}

}  // namespace muster::cli
