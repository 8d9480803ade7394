// Rank variables and PET_* left in the environment.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "doctor/src/util.h"
#include "muster/doctor/checks.h"

namespace muster::doctor {
namespace {

using internal::Find;
using internal::Get;
using internal::UnsetCommand;

}  // namespace

Check EnvironmentCheck(const std::map<std::string, std::string>& env,
                       const std::string& master_addr, int master_port,
                       const std::string& os) {
  Check c;
  c.id = "environment";
  c.title = "environment";
  static const char* const kVars[] = {"RANK",
                                      "WORLD_SIZE",
                                      "LOCAL_RANK",
                                      "LOCAL_WORLD_SIZE",
                                      "GROUP_RANK",
                                      "GROUP_WORLD_SIZE",
                                      "ROLE_RANK",
                                      "MASTER_ADDR",
                                      "MASTER_PORT",
                                      "TORCHELASTIC_RUN_ID",
                                      "TORCHELASTIC_RESTART_COUNT",
                                      "MUSTER_RUN_ID",
                                      "MUSTER_STORE_ENDPOINT",
                                      "MUSTER_ROUND"};
  nlohmann::json set = nlohmann::json::object();
  std::vector<std::string> present;
  for (const char* v : kVars) {
    if (const std::string* val = Find(env, v)) {
      set[v] = *val;
      present.push_back(absl::StrCat(v, "=", *val));
    }
  }
  std::vector<std::string> pet;
  for (const auto& [k, v] : env) {
    if (absl::StartsWith(k, "PET_")) pet.push_back(absl::StrCat(k, "=", v));
  }
  c.data["set"] = set;
  c.data["pet"] = pet;
  std::vector<std::string> fails;
  std::vector<std::string> warns;
  auto number = [&](const char* key, int* out) {
    const std::string* v = Find(env, key);
    if (v == nullptr) return false;
    if (!absl::SimpleAtoi(*v, out) || *out < 0) {
      fails.push_back(absl::StrCat(key, "='", *v, "' is not a number >= 0"));
      return false;
    }
    return true;
  };
  int rank = 0, world = 0, local = 0, local_world = 0, mport = 0;
  const bool has_rank = number("RANK", &rank);
  const bool has_world = number("WORLD_SIZE", &world);
  const bool has_local = number("LOCAL_RANK", &local);
  const bool has_local_world = number("LOCAL_WORLD_SIZE", &local_world);
  if (has_rank && has_world && rank >= world) {
    fails.push_back(
        absl::StrCat("RANK=", rank, " is not below WORLD_SIZE=", world));
  }
  if (has_local && has_local_world && local >= local_world) {
    fails.push_back(absl::StrCat(
        "LOCAL_RANK=", local, " is not below LOCAL_WORLD_SIZE=", local_world));
  }
  if (has_world && has_local_world && local_world > world) {
    fails.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", local_world,
                                 " exceeds WORLD_SIZE=", world));
  }
  if (const std::string* mp = Find(env, "MASTER_PORT")) {
    if (!absl::SimpleAtoi(*mp, &mport) || mport < 1 || mport > 65535) {
      fails.push_back(
          absl::StrCat("MASTER_PORT='", *mp, "' is not a port in 1..65535"));
    } else if (master_port != 0 && mport != master_port) {
      warns.push_back(absl::StrCat(
          "MASTER_PORT=", mport, " differs from --master-port=", master_port));
    }
  }
  if (const std::string* ma = Find(env, "MASTER_ADDR")) {
    if (!master_addr.empty() && *ma != master_addr) {
      warns.push_back(absl::StrCat(
          "MASTER_ADDR=", *ma, " differs from --master-addr=", master_addr));
    }
  }
  const std::string run_id = !Get(env, "MUSTER_RUN_ID").empty()
                                 ? Get(env, "MUSTER_RUN_ID")
                                 : Get(env, "TORCHELASTIC_RUN_ID");
  if (!run_id.empty()) {
    warns.push_back(absl::StrCat(
        "this shell looks like a worker of job '", run_id,
        "' (a launcher set TORCHELASTIC_RUN_ID/MUSTER_RUN_ID): a muster "
        "started here launches a nested job"));
  } else if (!present.empty()) {
    warns.push_back(
        "rank variables are exported in this shell (stale exports?): muster "
        "gives its workers fresh values, but a program started without it, "
        "or init_process_group(init_method='env://') run by hand, uses these");
  }
  if (!pet.empty()) {
    warns.push_back(absl::StrCat(
        "PET_* variables set muster's flags when the flag is not given: ",
        absl::StrJoin(pet, " ")));
  }
  if (!present.empty()) {
    c.evidence.push_back(absl::StrCat("set: ", absl::StrJoin(present, " ")));
  }
  for (const auto& f : fails) c.evidence.push_back(f);
  for (const auto& w : warns) c.evidence.push_back(w);
  if (!fails.empty()) {
    c.status = Status::kFail;
    c.summary = absl::StrCat("conflicting rank variables: ", fails.front());
  } else if (!warns.empty()) {
    c.status = Status::kWarn;
    c.summary =
        present.empty()
            ? "PET_* variables change muster's flags"
            : absl::StrCat(present.size(), " rank variable(s) already set: ",
                           absl::StrJoin(present, " "));
  } else {
    c.status = Status::kPass;
    c.summary =
        "no RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR or MASTER_PORT "
        "set";
    return c;
  }
  std::vector<std::string> names;
  for (const char* v : kVars) {
    if (Find(env, v) != nullptr) names.push_back(v);
  }
  for (const auto& p : pet) names.push_back(p.substr(0, p.find('=')));
  c.fix.push_back(
      "Unset them unless this shell is meant to be a worker (run muster from "
      "a clean shell):");
  c.commands.push_back(UnsetCommand(os, names));
  return c;
}

}  // namespace muster::doctor
