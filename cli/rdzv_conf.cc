#include "cli/rdzv_conf.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/flag_util.h"
#include "muster/common/duration.h"
#include "muster/rendezvous/defaults.h"

namespace muster::cli {
namespace {

// One key of rdzv-conf. Exactly one of the value pointers is set.
struct RdzvConfKey {
  const char* name;
  // Another name of the key, read only by torchrun's etcd (v1) backend; its
  // c10d backend ignores it (see ParseRdzvConf).
  const char* etcd_alias = nullptr;
  // A duration, within `range`.
  std::optional<absl::Duration> RdzvConf::*duration = nullptr;
  DurationRange range = {};
  // A count from 1 to kMaxCount.
  std::optional<int> RdzvConf::*count = nullptr;
  std::optional<bool> RdzvConf::*flag = nullptr;
  // A file path (the security keys, which status and doctor read too).
  std::string RdzvConf::*path = nullptr;
};

// Every duration has sane bounds: a heartbeat every nanosecond (or once a
// year) is a typo, not a setting. Default bounds: 10 ms .. 7 days. A zero last
// call closes the round as soon as min nodes are in; a zero close timeout ends
// it at once; a zero reconnect timeout gives up at the first loss.
constexpr DurationRange kTimeout = {absl::Milliseconds(10), absl::Hours(24 * 7),
                                    /*zero_ok=*/false};
constexpr DurationRange kTimeoutOrZero = {
    absl::Milliseconds(10), absl::Hours(24 * 7), /*zero_ok=*/true};
// torchrun's keep-alive is 5 s x 3 attempts: 15 s before a hung agent is
// noticed. muster's defaults (0.25 s x 4, see AgentConfig) notice it in about
// a second, which is what lets survivors leave a dead collective quickly; the
// heartbeat is a tiny message on a stream that is open anyway, so the faster
// rate costs nothing measurable. A user who asks for torchrun's values still
// gets them.
constexpr DurationRange kHeartbeat = {absl::Milliseconds(10), absl::Seconds(60),
                                      /*zero_ok=*/false};
constexpr int kMaxCount = 1000;
// Lease fencing (docs/architecture.md): shorter than 1 s, a loaded node loses
// its lease and restarts the round for nothing.
constexpr DurationRange kLease = {rendezvous::kMinLease, rendezvous::kMaxLease,
                                  /*zero_ok=*/false};

// clang-format off
const RdzvConfKey kRdzvConfKeys[] = {
    {.name = "join_timeout", .etcd_alias = "timeout",
     .duration = &RdzvConf::join_timeout, .range = kTimeout},
    {.name = "last_call_timeout",
     .duration = &RdzvConf::last_call_timeout, .range = kTimeoutOrZero},
    {.name = "close_timeout",
     .duration = &RdzvConf::close_timeout, .range = kTimeoutOrZero},
    {.name = "read_timeout",
     .duration = &RdzvConf::read_timeout, .range = kTimeout},
    {.name = "connect_timeout",
     .duration = &RdzvConf::connect_timeout, .range = kTimeout},
    {.name = "reconnect_timeout",
     .duration = &RdzvConf::reconnect_timeout, .range = kTimeoutOrZero},
    {.name = "preflight_timeout",
     .duration = &RdzvConf::preflight_timeout, .range = kTimeout},
    {.name = "keep_alive_interval",
     .duration = &RdzvConf::keep_alive_interval, .range = kHeartbeat},
    {.name = "lease_timeout",
     .duration = &RdzvConf::lease_timeout, .range = kLease},
    {.name = "keep_alive_max_attempt", .count = &RdzvConf::keep_alive_max_attempt},
    {.name = "is_host", .flag = &RdzvConf::is_host},
    {.name = "tls_ca", .path = &RdzvConf::tls_ca},
    {.name = "tls_cert", .path = &RdzvConf::tls_cert},
    {.name = "tls_key", .path = &RdzvConf::tls_key},
    {.name = "token_file", .path = &RdzvConf::token_file},
};
// clang-format on

const RdzvConfKey* FindKey(absl::string_view key, bool etcd_aliases) {
  for (const RdzvConfKey& k : kRdzvConfKeys) {
    if (key == k.name) return &k;
    if (etcd_aliases && k.etcd_alias != nullptr && key == k.etcd_alias) {
      return &k;
    }
  }
  return nullptr;
}

// "join_timeout (alias timeout), last_call_timeout, ..., token_file".
std::string KeyList() {
  return absl::StrJoin(kRdzvConfKeys, ", ",
                       [](std::string* out, const RdzvConfKey& k) {
                         absl::StrAppend(out, k.name);
                       });
}

std::string UnknownKeyWarning(const std::string& key) {
  std::string hint;
  for (const RdzvConfKey& k : kRdzvConfKeys) {
    if (EditDistance(key, k.name) <= 2) {
      hint = absl::StrCat(" (did you mean ", k.name, "?)");
      break;
    }
    if (k.etcd_alias != nullptr && key == k.etcd_alias) {
      hint = absl::StrCat(" (torchrun's etcd backend reads it as ", k.name,
                          "; its c10d backend ignores it, as muster does)");
      break;
    }
  }
  return absl::StrCat("ignoring key '", key, "'", hint,
                      ", which muster's rendezvous does not use; its keys are ",
                      KeyList());
}

absl::Status SetValue(const RdzvConfKey& k, const std::string& key,
                      absl::string_view value, RdzvConf* conf) {
  if (k.path != nullptr) {
    if (value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, "= needs a file path"));
    }
    conf->*k.path = std::string(value);
  } else if (k.flag != nullptr) {
    std::optional<bool> b = ParseBool(value);
    if (!b.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, "=", value, ": expected true, false, 1 or 0"));
    }
    conf->*k.flag = b;
  } else if (k.count != nullptr) {
    std::optional<int> n = ParseInt(value);
    if (!n.has_value() || *n < 1 || *n > kMaxCount) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, "=", value, ": expected a whole number of heartbeats from 1 to ",
          kMaxCount));
    }
    conf->*k.count = n;
  } else {
    absl::StatusOr<absl::Duration> d = ParseDuration(value);
    if (!d.ok() || (!k.range.zero_ok && *d == absl::ZeroDuration())) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, "=", value, ": expected seconds ",
                       k.range.zero_ok ? ">= 0" : "> 0", ", e.g. ", key,
                       "=30 or ", key, "=0.5"));
    }
    if (!k.range.Contains(*d)) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, "=", value, " is out of range: expected ", k.range.Describe()));
    }
    conf->*k.duration = *d;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RdzvConf::ApplyTo(agent::AgentConfig* config) const {
  const std::pair<const std::optional<absl::Duration>&, absl::Duration&>
      durations[] = {
          {join_timeout, config->join_timeout},
          {last_call_timeout, config->last_call_timeout},
          {close_timeout, config->close_timeout},
          {read_timeout, config->read_timeout},
          {connect_timeout, config->connect_timeout},
          {reconnect_timeout, config->reconnect_timeout},
          {preflight_timeout, config->preflight_timeout},
          {keep_alive_interval, config->heartbeat_interval},
      };
  for (const auto& [given, field] : durations) {
    if (given.has_value()) field = *given;
  }
  if (keep_alive_interval.has_value()) config->heartbeat_interval_fixed = true;
  if (keep_alive_max_attempt.has_value()) {
    config->heartbeat_max_missed = *keep_alive_max_attempt;
  }
  if (lease_timeout.has_value()) {
    config->lease_timeout = *lease_timeout;
  } else {
    config->lease_timeout = std::min(
        kLease.max,
        std::max(config->lease_timeout, config->heartbeat_interval * 4));
  }
  if (config->lease_timeout < config->heartbeat_interval * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease_timeout=", absl::FormatDuration(config->lease_timeout),
        " is shorter than 4 heartbeats (keep_alive_interval=",
        absl::FormatDuration(config->heartbeat_interval),
        "): a lease must be renewed several times before it ends; raise "
        "lease_timeout or lower keep_alive_interval"));
  }
  if (!tls_ca.empty()) config->security.tls_ca = tls_ca;
  if (!tls_cert.empty()) config->security.tls_cert = tls_cert;
  if (!tls_key.empty()) config->security.tls_key = tls_key;
  return absl::OkStatus();
}

absl::StatusOr<RdzvConf> ParseRdzvConf(absl::string_view text,
                                       RdzvConfScope scope, bool etcd_aliases) {
  RdzvConf conf;
  for (absl::string_view item :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::string key =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(kv.first));
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    const RdzvConfKey* k = FindKey(key, etcd_aliases);
    if (scope == RdzvConfScope::kSecurityOnly) {
      // Everything but the files is the launcher's to check; "tls_ca" alone
      // is a file path left out.
      if (k == nullptr || k->path == nullptr) continue;
    } else if (item.find('=') == absl::string_view::npos || key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", item, "' is not KEY=VALUE; write e.g. join_timeout=900"));
    } else if (k == nullptr) {
      conf.warnings.push_back(UnknownKeyWarning(key));
      continue;
    }
    if (absl::Status s = SetValue(*k, key, value, &conf); !s.ok()) return s;
  }
  return conf;
}

}  // namespace muster::cli
