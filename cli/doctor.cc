// `muster doctor`'s command line: parses the flags into doctor::Options and
// wires the doctor module (plan, collector, checks, rendering), adding the
// facts only the launcher's libraries know (TLS to musterd, the job's
// rdzv-conf).
#include "cli/doctor.h"

#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/doctor_node.h"
#include "cli/security_flags.h"
#include "cli/subcommand.h"
#include "muster/common/duration.h"
#include "muster/doctor/checks.h"
#include "muster/doctor/collector.h"
#include "muster/doctor/render.h"
#include "muster/store/security.h"

namespace muster::cli {
namespace {

std::string Get(const std::map<std::string, std::string>& env,
                const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? "" : it->second;
}

absl::StatusOr<absl::Duration> ParseTimeout(const std::string& text) {
  absl::StatusOr<absl::Duration> parsed = muster::ParseDuration(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout '", text,
                     "': write seconds (2, 0.5) or a duration (500ms)"));
  }
  const absl::Duration d = *parsed;
  if (d <= absl::ZeroDuration() || d > absl::Minutes(5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout '", text, "' must be in (0, 5m]"));
  }
  return d;
}

doctor::TlsAnswer ToAnswer(store::TlsProbe p) {
  switch (p) {
    case store::TlsProbe::kTls:
      return doctor::TlsAnswer::kTls;
    case store::TlsProbe::kPlaintext:
      return doctor::TlsAnswer::kPlaintext;
    case store::TlsProbe::kUnknown:
      break;
  }
  return doctor::TlsAnswer::kUnknown;
}

// What the job's agents would do about TLS, and what musterd at each
// endpoint speaks (only where its probe found it open).
doctor::SecurityFacts Security(const doctor::Plan& plan,
                               const doctor::Facts& facts,
                               const std::string& rdzv_conf,
                               const std::map<std::string, std::string>& env) {
  doctor::SecurityFacts s;
  absl::StatusOr<store::ClientSecurity> security =
      ClientSecurityFromFlags(rdzv_conf, "", env);
  s.client_tls = security.ok() && security->tls();
  s.token = security.ok() && !security->token.empty();
  for (size_t i = 0; i < plan.targets.size(); ++i) {
    const doctor::Target& t = plan.targets[i];
    const bool open = i < facts.probes.size() &&
                      facts.probes[i].outcome == ProbeOutcome::kOpen;
    s.endpoint_tls.push_back(
        t.id == "endpoint" && open
            ? ToAnswer(
                  store::ProbeTls(t.hp.host, t.hp.port, plan.options.timeout))
            : doctor::TlsAnswer::kUnknown);
  }
  return s;
}

}  // namespace

int RunDoctor(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env) {
  doctor::Options opt;
  bool json = false;
#ifdef _WIN32
  opt.os = "windows";
#else
  opt.os = "linux";
#endif
  std::string ports_text;
  std::string timeout_text = "2";
  CLI::App app(
      "Checks why the nodes of a job cannot talk: connectivity to the "
      "rendezvous endpoint, the master and peers (refused / filtered / "
      "rejected / unreachable / DNS), ports in use and by whom, the host name "
      "resolving to loopback (127.0.1.1), Gloo and NCCL interface choice, the "
      "local firewall and the command that opens the ports, CUDA/NCCL, and "
      "stale rank variables. Exit status 1 when a check fails.",
      "muster doctor");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", opt.rdzv_endpoint,
                 "HOST[:PORT] of the rendezvous server (port 29400)");
  app.add_option("--master-addr,--master_addr", opt.master_addr,
                 "static mode's master address");
  app.add_option("--master-port,--master_port", opt.master_port,
                 "static mode's master port (29500)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--peer", opt.peers,
                 "HOST[:PORT] of another node (repeatable; without a port: "
                 "the --ports, else the master port)")
      ->delimiter(',');
  app.add_option("--ports", ports_text,
                 "the TCP ports the job uses here, A-B or a comma list");
  app.add_flag("--json", json, "print JSON instead of a table");
  std::string rdzv_conf = Get(env, "PET_RDZV_CONF");
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf,
                 "the job's rdzv-conf: tls_ca, tls_cert, tls_key, token_file "
                 "say whether it uses TLS and a token");
  app.add_option("--os", opt.os,
                 "write firewall commands for linux or windows (default: this "
                 "platform)")
      ->check(CLI::IsMember({"linux", "windows"}));
  app.add_option("--timeout", timeout_text,
                 "connect timeout of each probe: seconds or a duration (2)");
  // --node: the built-in node checks (cli/doctor_node.cc), for
  // --health-check.
  bool node = false;
  doctor::NodeOptions node_opt;
  double min_free_gib = 1;
  app.add_flag("--node", node,
               "check this node instead: free space in --log-dir, GPUs "
               "visible vs --nproc-per-node, the --local-addr interface up "
               "(fit for --health-check)");
  app.add_option("--log-dir", node_opt.log_dir, "with --node: the log dir");
  app.add_option("--nproc-per-node", node_opt.nproc_per_node,
                 "with --node: gpu, or a number of workers");
  app.add_option("--local-addr", node_opt.advertised_address,
                 "with --node: the address this node advertises");
  app.add_option("--min-free-gb", min_free_gib,
                 "with --node: free space wanted in the log dir, GiB (1)")
      ->check(CLI::NonNegativeNumber);
  if (std::optional<int> exit = ParseSubcommandArgs(
          app, args, "muster doctor", 2, "\nRun 'muster doctor --help'.")) {
    return *exit;
  }
  if (node) {
    node_opt.min_free_bytes = static_cast<int64_t>(min_free_gib * (1 << 30));
    return RunDoctorNode(node_opt, json, opt.os, env);
  }
  auto timeout = ParseTimeout(timeout_text);
  if (!timeout.ok()) {
    std::fprintf(stderr, "muster doctor: %s\n",
                 std::string(timeout.status().message()).c_str());
    return 2;
  }
  opt.timeout = *timeout;
  if (!ports_text.empty()) {
    auto ports = doctor::ParsePortRanges(ports_text);
    if (!ports.ok()) {
      std::fprintf(stderr, "muster doctor: %s\n",
                   std::string(ports.status().message()).c_str());
      return 2;
    }
    opt.ports = *ports;
  }
  // Kubeflow's PET_* spellings stand in for absent flags, as for the launcher.
  if (opt.rdzv_endpoint.empty())
    opt.rdzv_endpoint = Get(env, "PET_RDZV_ENDPOINT");
  if (opt.master_addr.empty()) opt.master_addr = Get(env, "PET_MASTER_ADDR");
  if (opt.master_port == 0) {
    int p = 0;
    if (absl::SimpleAtoi(Get(env, "PET_MASTER_PORT"), &p)) opt.master_port = p;
  }

  auto plan = doctor::MakePlan(opt);
  if (!plan.ok()) {
    std::fprintf(stderr, "muster doctor: %s\n",
                 std::string(plan.status().message()).c_str());
    return 2;
  }
  doctor::Facts facts = doctor::NewSystemCollector()->Collect(*plan, env);
  facts.security = Security(*plan, facts, rdzv_conf, env);
  const doctor::Report report = doctor::Diagnose(*plan, facts);
  if (json) {
    std::fputs(doctor::FormatJson(report).c_str(), stdout);
  } else {
    int width = 100;
    int cols = 0;
    if (absl::SimpleAtoi(Get(env, "COLUMNS"), &cols) && cols >= 60)
      width = cols;
    std::fputs(doctor::FormatText(report, width).c_str(), stdout);
  }
  std::fflush(stdout);
  return report.ExitStatus();
}

}  // namespace muster::cli
