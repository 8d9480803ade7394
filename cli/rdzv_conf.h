// --rdzv-conf (and PET_RDZV_CONF): "KEY=VALUE,KEY=VALUE", torchrun's
// rendezvous settings. The one parser of these strings: the launcher reads
// every key, `muster status` and `muster doctor` only the security ones, so
// that one PET_RDZV_CONF serves all three.
//
// Keys (see kRdzvConfKeys in rdzv_conf.cc for the bounds):
//   join_timeout, last_call_timeout, close_timeout,
//   read_timeout, connect_timeout, reconnect_timeout, preflight_timeout,
//   keep_alive_interval   durations: seconds (30, 0.5) or 500ms, 2m
//   keep_alive_max_attempt  heartbeats missed before an agent is lost, 1..1000
//   is_host               true|false: whether this node runs the server
//   tls_ca, tls_cert, tls_key, token_file   PEM files, the job token's file
// Keys muster does not read (torchrun's use_libuv, a backend's own settings,
// PyTorch's own tests' `'join_timeout=5,...,timeout=5'` with the shell's
// quotes inside the value) are ignored with a warning naming them, as
// torchrun's c10d backend ignores what it does not read: the same command
// line must run under both launchers. Values of the keys muster reads are
// checked.
#ifndef MUSTER_CLI_RDZV_CONF_H_
#define MUSTER_CLI_RDZV_CONF_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "muster/agent/config.h"

namespace muster::cli {

// What a rdzv-conf string says; a key not given stays empty (nullopt, "").
struct RdzvConf {
  std::optional<absl::Duration> join_timeout;
  std::optional<absl::Duration> last_call_timeout;
  std::optional<absl::Duration> close_timeout;
  std::optional<absl::Duration> read_timeout;
  std::optional<absl::Duration> connect_timeout;
  std::optional<absl::Duration> reconnect_timeout;
  std::optional<absl::Duration> preflight_timeout;
  std::optional<absl::Duration> keep_alive_interval;
  std::optional<absl::Duration> lease_timeout;
  std::optional<int> keep_alive_max_attempt;
  std::optional<bool> is_host;
  // File paths, neither read nor checked here (ClientSecurity::Validate and
  // rendezvous::ReadTokenFile do that).
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string token_file;
  // One sentence per key muster ignores, "ignoring key 'use_libuv', which
  // ..."; the caller puts the source (--rdzv-conf, PET_RDZV_CONF) before it.
  std::vector<std::string> warnings;

  // Copies the timing settings given (durations, keep_alive_max_attempt) and
  // the TLS file paths into `config`; is_host and token_file are the caller's.
  // Without lease_timeout, the default lease grows to 4 heartbeats (at most
  // 60 s) so that torchrun's keep_alive_interval=5 still runs. Errors:
  // INVALID_ARGUMENT when the lease is shorter than 4 heartbeats.
  absl::Status ApplyTo(agent::AgentConfig* config) const;
};

enum class RdzvConfScope {
  kAll,           // the launcher: every key checked, unknown keys warned about
  kSecurityOnly,  // status, doctor: tls_* and token_file; the rest skipped
};

// Parses `text` (KEY=VALUE items separated by commas; keys in any case, white
// space around keys, values and items ignored; a later key wins). Errors:
// INVALID_ARGUMENT whose message names the item and the fix, without the
// source, e.g. "join_timeout=abc: expected seconds > 0, e.g. join_timeout=30
// or join_timeout=0.5" or "keep_alive_interval=1e-9 is out of range: expected
// seconds from 10ms to 1m". Pure; thread-safe. `etcd_aliases`: also read
// `timeout` as join_timeout, as torchrun's etcd (v1) backend does; its c10d
// backend (the default) reads no `timeout` key, and PyTorch's own tests pass
// one that is not a number.
absl::StatusOr<RdzvConf> ParseRdzvConf(
    absl::string_view text, RdzvConfScope scope = RdzvConfScope::kAll,
    bool etcd_aliases = false);

}  // namespace muster::cli

#endif  // MUSTER_CLI_RDZV_CONF_H_
