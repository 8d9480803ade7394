// Validates rendered Kubernetes manifests offline.
//
//   node validate.mjs FILE...    (multi-document YAML, e.g. `kubectl kustomize DIR` output)
//
// Each object is checked three ways:
//  1. against the official Kubernetes OpenAPI schema (kubernetes-models: types, enums,
//     required fields);
//  2. for fields the API does not know, which that schema lets through but an API server with
//     strict field validation (kubectl's default) rejects, using the generated models of
//     @kubernetes/client-node;
//  3. against muster's own rules: probes and resource requests on musterd, an Indexed Job whose
//     completions, parallelism and MUSTER_NNODES agree, the podFailurePolicy, a headless Service
//     for the pods' subdomain, Service selectors that select something, every $(VAR) in a
//     command defined (and in an env value, defined before it);
//     replicated musterd (--etcd-endpoints): /readyz readiness and never /readyz liveness, the
//     pod IP advertised, a headless Service that lists the standbys, endpoints that exist, TLS
//     files on volumes, agents pointed at every replica; without etcd, one replica only;
//     etcd's StatefulSet: an odd member count started in parallel, --initial-cluster naming
//     exactly its members under its headless Service, data on a claimed volume, limits that
//     musterd's batches fit in, probes that do not restart a cluster that lost its quorum, and
//     a PodDisruptionBudget that keeps the quorum.
// Custom resources (JobSet, PyTorchJob) are checked by their own known fields, and the pod and
// Job templates inside them as the built-in types they are.
// Exit status: 0 when everything is valid, 1 otherwise (each problem printed with its path).
import fs from "node:fs";
import * as k8s from "@kubernetes/client-node";
import YAML from "yaml";

const problems = [];
const problem = (where, what) => problems.push(`${where}: ${what}`);

// --- 1. the OpenAPI schema

async function modelClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const path = `kubernetes-models/${group ? group + "/" : ""}${version}/${kind}`;
  try {
    return (await import(path))[kind];
  } catch {
    return undefined;
  }
}

async function validateSchema(where, obj) {
  const Model = await modelClass(obj.apiVersion, obj.kind);
  if (!Model) {
    problem(where, `no schema for ${obj.apiVersion} ${obj.kind}`);
    return;
  }
  try {
    new Model(obj).validate();
  } catch (e) {
    problem(where, `schema: ${e.message}`);
  }
}

// --- 2. unknown fields

function strictWalk(where, value, type) {
  if (value === null || value === undefined) return;
  let m;
  if ((m = /^Array<(.+)>$/.exec(type))) {
    if (!Array.isArray(value)) return problem(where, `expected a list`);
    value.forEach((v, i) => strictWalk(`${where}[${i}]`, v, m[1]));
    return;
  }
  if ((m = /^\{ \[key: string\]: (.+); \}$/.exec(type))) {
    if (typeof value !== "object" || Array.isArray(value)) return problem(where, `expected a map`);
    for (const [k, v] of Object.entries(value)) strictWalk(`${where}.${k}`, v, m[1]);
    return;
  }
  const cls = k8s[type];
  if (!cls || !cls.attributeTypeMap) return; // a scalar, IntOrString, any
  if (typeof value !== "object" || Array.isArray(value)) return problem(where, `expected an object (${type})`);
  const known = new Map(cls.attributeTypeMap.map((a) => [a.baseName, a.type]));
  for (const [k, v] of Object.entries(value)) {
    if (!known.has(k)) problem(`${where}.${k}`, `unknown field (not in ${type})`);
    else strictWalk(`${where}.${k}`, v, known.get(k));
  }
}

function builtinType(apiVersion, kind) {
  const version = apiVersion.includes("/") ? apiVersion.split("/")[1] : apiVersion;
  const name = version[0].toUpperCase() + version.slice(1) + kind;
  return k8s[name]?.attributeTypeMap ? name : undefined;
}

// Known fields of a custom resource: a nested description; "*" for a map of any keys, [spec]
// for a list, a string for a built-in type.
function customWalk(where, value, spec) {
  if (value === null || value === undefined) return;
  if (typeof spec === "string") return strictWalk(where, value, spec);
  if (spec === "scalar") {
    if (typeof value === "object") problem(where, "expected a scalar");
    return;
  }
  if (Array.isArray(spec)) {
    if (!Array.isArray(value)) return problem(where, "expected a list");
    value.forEach((v, i) => customWalk(`${where}[${i}]`, v, spec[0]));
    return;
  }
  if (typeof value !== "object" || Array.isArray(value)) return problem(where, "expected an object");
  for (const [k, v] of Object.entries(value)) {
    const sub = spec[k] ?? spec["*"];
    if (sub === undefined) problem(`${where}.${k}`, "unknown field");
    else customWalk(`${where}.${k}`, v, sub);
  }
}

// jobset.x-k8s.io/v1alpha2 (JobSet's API types).
const kJobSetSpec = {
  replicatedJobs: [{ name: "scalar", groupName: "scalar", replicas: "scalar", template: "V1JobTemplateSpec", dependsOn: [{ name: "scalar", status: "scalar" }] }],
  network: { enableDNSHostnames: "scalar", subdomain: "scalar", publishNotReadyAddresses: "scalar" },
  successPolicy: { operator: "scalar", targetReplicatedJobs: ["scalar"] },
  failurePolicy: { maxRestarts: "scalar", restartStrategy: "scalar", rules: [{ name: "scalar", action: "scalar", onJobFailureReasons: ["scalar"], targetReplicatedJobs: ["scalar"] }] },
  startupPolicy: { startupPolicyOrder: "scalar" },
  coordinator: { replicatedJob: "scalar", jobIndex: "scalar", podIndex: "scalar" },
  suspend: "scalar",
  managedBy: "scalar",
  ttlSecondsAfterFinished: "scalar",
};
// kubeflow.org/v1 PyTorchJob (the training operator's API types).
const kReplicaSpec = { replicas: "scalar", restartPolicy: "scalar", template: "V1PodTemplateSpec" };
const kPyTorchJobSpec = {
  pytorchReplicaSpecs: { Master: kReplicaSpec, Worker: kReplicaSpec },
  runPolicy: { cleanPodPolicy: "scalar", ttlSecondsAfterFinished: "scalar", activeDeadlineSeconds: "scalar", backoffLimit: "scalar", suspend: "scalar", managedBy: "scalar", schedulingPolicy: { "*": "scalar" } },
  elasticPolicy: { minReplicas: "scalar", maxReplicas: "scalar", rdzvBackend: "scalar", rdzvPort: "scalar", rdzvHost: "scalar", rdzvId: "scalar", rdzvConf: [{ key: "scalar", value: "scalar" }], standalone: "scalar", nProcPerNode: "scalar", maxRestarts: "scalar", metrics: ["V2MetricSpec"] },
  nprocPerNode: "scalar",
};

// --- 3. muster's rules

const labelsMatch = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => (labels ?? {})[k] === v);

// Every pod template of the render, with where it is and what owns it.
function podTemplates(objects) {
  const out = [];
  for (const { where, obj } of objects) {
    if (obj.kind === "Deployment" || obj.kind === "Job" || obj.kind === "StatefulSet") {
      out.push({ where: `${where}.spec.template`, template: obj.spec?.template, owner: obj, job: obj.kind === "Job" ? obj : undefined });
    } else if (obj.kind === "JobSet") {
      (obj.spec?.replicatedJobs ?? []).forEach((rj, i) =>
        out.push({ where: `${where}.spec.replicatedJobs[${i}].template.spec.template`, template: rj.template?.spec?.template, owner: obj, job: { metadata: { name: `${obj.metadata?.name}-${rj.name}` }, spec: rj.template?.spec }, jobset: obj }));
    } else if (obj.kind === "PyTorchJob") {
      for (const [role, rs] of Object.entries(obj.spec?.pytorchReplicaSpecs ?? {})) {
        out.push({ where: `${where}.spec.pytorchReplicaSpecs.${role}.template`, template: rs.template, owner: obj });
      }
    }
  }
  return out;
}

function checkContainer(where, c, { indexed }) {
  // The kubelet expands $(VAR) in an env value only from the entries before it (and kustomize's
  // patches reorder env lists: the patch's entries come first).
  const before = new Set();
  for (const [i, e] of (c.env ?? []).entries()) {
    for (const m of String(e.value ?? "").matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
      if (!before.has(m[1])) problem(`${where}.env[${i}] ${e.name}`, `$(${m[1]}) is not defined before it: the container would get it literally`);
    }
    before.add(e.name);
  }
  const defined = new Set((c.env ?? []).map((e) => e.name));
  if (indexed) defined.add("JOB_COMPLETION_INDEX"); // set by the Job controller
  for (const [i, arg] of [...(c.command ?? []), ...(c.args ?? [])].entries()) {
    for (const m of String(arg).matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
      if (!defined.has(m[1])) problem(`${where}.command/args[${i}]`, `$(${m[1]}) is not defined in env: the container would get it literally`);
    }
  }
  const req = c.resources?.requests ?? {};
  if (!req.cpu || !req.memory) problem(`${where}.resources.requests`, "needs cpu and memory requests");
}

function checkMuster(objects) {
  const services = objects.filter(({ obj }) => obj.kind === "Service");
  const templates = podTemplates(objects);
  for (const t of templates) {
    const spec = t.template?.spec ?? {};
    const indexed = t.job?.spec?.completionMode === "Indexed";
    (spec.containers ?? []).forEach((c, i) => checkContainer(`${t.where}.spec.containers[${i}]`, c, { indexed }));
    const musterd = (spec.containers ?? []).find((c) => (c.command ?? [])[0] === "musterd");
    if (musterd) {
      for (const probe of ["readinessProbe", "livenessProbe"]) {
        const p = musterd[probe];
        if (!p || !(p.grpc || p.httpGet || p.tcpSocket)) problem(`${t.where} musterd`, `needs a ${probe}`);
      }
      checkMusterd(t, musterd, objects, services);
    }
    const etcd = (spec.containers ?? []).find((c) => /(^|\/)etcd$/.test((c.command ?? [])[0] ?? ""));
    if (etcd && t.owner.kind === "StatefulSet") checkEtcd(t, etcd, objects, services);
    const agent = (spec.containers ?? []).find((c) => (c.command ?? [])[0] === "muster");
    if (agent) checkAgentEndpoint(t, agent, objects, services, templates);
    if (!agent || !t.job) continue;
    // An agent per pod, in a Job: the node count must agree everywhere.
    const js = t.job.spec ?? {};
    if (js.completionMode !== "Indexed") problem(t.where, "the workers' Job needs completionMode: Indexed");
    if (js.completions !== js.parallelism) problem(t.where, `completions (${js.completions}) != parallelism (${js.parallelism}): all nodes must run at once`);
    const nnodes = (agent.env ?? []).find((e) => e.name === "MUSTER_NNODES")?.value;
    if (nnodes !== undefined && String(js.completions) !== String(nnodes)) problem(t.where, `MUSTER_NNODES=${nnodes} but completions=${js.completions}`);
    if (spec.restartPolicy !== "Never") problem(t.where, "restartPolicy must be Never (podFailurePolicy needs it)");
    const rules = js.podFailurePolicy?.rules ?? [];
    const failOn2 = rules.some((r) => r.action === "FailJob" && r.onExitCodes?.operator === "In" && (r.onExitCodes.values ?? []).includes(2) && (!r.onExitCodes.containerName || r.onExitCodes.containerName === agent.name));
    if (!failOn2) problem(t.where, "podFailurePolicy must fail the Job on muster's configuration-error exit code 2");
    const ignoreDisruption = rules.some((r) => r.action === "Ignore" && (r.onPodConditions ?? []).some((c) => c.type === "DisruptionTarget"));
    if (!ignoreDisruption) problem(t.where, "podFailurePolicy must ignore DisruptionTarget (preemption, drain)");
    if (!t.jobset) {
      const sub = spec.subdomain;
      const svc = services.find(({ obj }) => obj.metadata?.name === sub);
      if (!sub || !svc) problem(t.where, `subdomain "${sub}" needs a headless Service of that name`);
      else if (svc.obj.spec?.clusterIP !== "None") problem(svc.where, "the workers' Service must be headless (clusterIP: None)");
      else if (!labelsMatch(svc.obj.spec?.selector, t.template?.metadata?.labels)) problem(svc.where, "the headless Service does not select the Job's pods");
    } else if (!t.jobset.spec?.network?.enableDNSHostnames) {
      problem(t.where, "the JobSet should set network.enableDNSHostnames");
    }
  }
  for (const { where, obj } of objects.filter(({ obj }) => obj.kind === "PodDisruptionBudget")) {
    const sel = obj.spec?.selector?.matchLabels;
    if (!sel || !templates.some((t) => labelsMatch(sel, t.template?.metadata?.labels))) problem(where, `selector ${JSON.stringify(sel)} selects no pod of these manifests`);
  }
  for (const { where, obj } of services) {
    const sel = obj.spec?.selector;
    if (!sel) continue;
    if (!templates.some((t) => labelsMatch(sel, t.template?.metadata?.labels))) problem(where, `selector ${JSON.stringify(sel)} selects no pod of these manifests`);
    // A named targetPort must be a port of the selected pods.
    for (const [i, p] of (obj.spec?.ports ?? []).entries()) {
      if (typeof p.targetPort !== "string") continue;
      const named = templates.filter((t) => labelsMatch(sel, t.template?.metadata?.labels)).some((t) => (t.template?.spec?.containers ?? []).some((c) => (c.ports ?? []).some((cp) => cp.name === p.targetPort)));
      if (!named) problem(`${where}.spec.ports[${i}]`, `targetPort "${p.targetPort}" names no container port`);
    }
  }
}

// --- replicated musterd and its etcd

// $(VAR) as the kubelet expands it from the container's literal env values (others left as they are).
function expandEnv(text, c) {
  const env = Object.fromEntries((c.env ?? []).filter((e) => e.value !== undefined).map((e) => [e.name, String(e.value)]));
  return String(text).replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (all, name) => (name in env ? expandEnv(env[name], { env: [] }) : all));
}

// The value of --NAME=VALUE among a container's args (expanded), or undefined.
function flag(c, name) {
  const args = [...(c.command ?? []).slice(1), ...(c.args ?? [])];
  const a = args.find((x) => String(x).startsWith(`--${name}=`));
  return a === undefined ? undefined : expandEnv(String(a).slice(name.length + 3), c);
}

const envSource = (c, name) => (c.env ?? []).find((e) => e.name === name);

// The Service a host name means, among the rendered ones: NAME, NAME.NS, NAME.NS.svc[.cluster.local].
function serviceByHost(services, host) {
  const name = host.split(".")[0];
  if (host.split(".").length > 1 && !/^[^.]+(\.[^.]+(\.svc(\.cluster\.local)?)?)?$/.test(host)) return undefined;
  return services.find(({ obj }) => obj.metadata?.name === name);
}

// The port number a probe or Service names: a number, or a container port's name.
function portNumber(c, port) {
  if (typeof port === "number") return port;
  return (c.ports ?? []).find((p) => p.name === port)?.containerPort;
}

const mountedAt = (c, path) => (c.volumeMounts ?? []).some((m) => path === m.mountPath || path.startsWith(m.mountPath.replace(/\/?$/, "/")));

function checkMusterd(t, c, objects, services) {
  const where = `${t.where} musterd`;
  const owner = t.owner;
  const replicas = owner.spec?.replicas ?? 1;
  const endpoints = flag(c, "etcd-endpoints");
  if (endpoints === undefined) {
    if (owner.kind === "Deployment" && replicas > 1) problem(where, `replicas: ${replicas} without --etcd-endpoints: each musterd would keep its own state in memory and agents would split between them`);
    if (owner.kind === "Deployment" && owner.spec?.strategy?.type !== "Recreate") problem(where, "without --etcd-endpoints the strategy must be Recreate: an update must never run two musterd at once");
    return;
  }
  // Replica mode.
  for (const url of endpoints.split(",")) {
    const m = /^(https?):\/\/([^/:]+):(\d+)\/?$/.exec(url);
    if (!m) {
      problem(where, `--etcd-endpoints: "${url}" is not http(s)://HOST:PORT`);
      continue;
    }
    const svc = serviceByHost(services, m[2]);
    if (svc && !(svc.obj.spec?.ports ?? []).some((p) => p.port === Number(m[3]))) problem(where, `--etcd-endpoints: Service ${svc.obj.metadata.name} has no port ${m[3]}`);
    // Rendered with an etcd of its own, musterd must use it (alone, it names one deployed beside).
    const ownEtcd = podTemplates(objects).some((x) => (x.template?.spec?.containers ?? []).some((k) => /(^|\/)etcd$/.test((k.command ?? [])[0] ?? "")));
    if (!svc && ownEtcd && !/^\d/.test(m[2])) problem(where, `--etcd-endpoints: "${m[2]}" is no Service of these manifests, which deploy their own etcd`);
    if (m[1] === "https" && flag(c, "etcd-ca") === undefined) problem(where, `--etcd-endpoints ${url} is https: needs --etcd-ca`);
  }
  if ((flag(c, "etcd-cert") === undefined) !== (flag(c, "etcd-key") === undefined)) problem(where, "--etcd-cert and --etcd-key go together");
  for (const f of ["etcd-ca", "etcd-cert", "etcd-key"]) {
    const path = flag(c, f);
    if (path !== undefined && !mountedAt(c, path)) problem(where, `--${f}=${path} is on no mounted volume`);
  }
  const probePath = (p) => p?.httpGet?.path;
  if (probePath(c.readinessProbe) !== "/readyz") problem(where, "readinessProbe must be httpGet /readyz (200 on the leader only), so the Service routes to the leader");
  if (probePath(c.livenessProbe) !== "/healthz") problem(where, `the livenessProbe must be httpGet /healthz${probePath(c.livenessProbe) === "/readyz" ? ": on /readyz it would restart every standby" : ""}`);
  if (c.startupProbe && probePath(c.startupProbe) !== "/healthz") problem(where, "the startupProbe must be httpGet /healthz: a standby never passes /readyz");
  const http = flag(c, "http-listen");
  if (http === undefined) problem(where, "replicas need --http-listen (/readyz, /healthz)");
  else {
    const port = Number(http.split(":").pop());
    for (const probe of ["readinessProbe", "livenessProbe", "startupProbe"]) {
      const p = c[probe]?.httpGet;
      if (p && portNumber(c, p.port) !== port) problem(where, `${probe} port ${p.port} is not --http-listen's ${port}`);
    }
  }
  if (replicas > 1) {
    if (owner.spec?.strategy?.type === "Recreate") problem(where, "strategy Recreate stops every replica at once: use RollingUpdate");
    const adv = (c.args ?? []).find((a) => String(a).startsWith("--advertise-addr="));
    if (!adv) problem(where, "replicas need --advertise-addr=$(POD_IP):PORT: a Deployment pod's host name does not resolve");
    else {
      const v = /^--advertise-addr=\[?\$\(([A-Za-z_][A-Za-z0-9_]*)\)\]?:\d+$/.exec(adv);
      const src = v && envSource(c, v[1]);
      if (!src || src.valueFrom?.fieldRef?.fieldPath !== "status.podIP") problem(where, `${adv}: must be the pod's IP ($(POD_IP) from fieldRef status.podIP) and a port`);
    }
    const labels = t.template?.metadata?.labels;
    const headless = services.filter(({ obj }) => obj.spec?.clusterIP === "None" && labelsMatch(obj.spec?.selector, labels));
    if (!headless.length) problem(where, "replicas need a headless Service selecting them all, for the agents' --rdzv-endpoint");
    for (const h of headless) {
      if (!h.obj.spec?.publishNotReadyAddresses) problem(h.where, "a headless Service of musterd replicas needs publishNotReadyAddresses: true (standbys are never ready, and agents must reach them)");
    }
    const aff = t.template?.spec?.affinity?.podAntiAffinity;
    const terms = [...(aff?.requiredDuringSchedulingIgnoredDuringExecution ?? []), ...(aff?.preferredDuringSchedulingIgnoredDuringExecution ?? []).map((p) => p.podAffinityTerm)];
    if (!terms.some((x) => x?.topologyKey === "kubernetes.io/hostname" && labelsMatch(x.labelSelector?.matchLabels, labels))) problem(where, "replicas need pod anti-affinity across nodes (topologyKey kubernetes.io/hostname)");
  }
}

function checkAgentEndpoint(t, c, objects, services, templates) {
  const ep = flag(c, "rdzv-endpoint");
  if (ep === undefined || ep.includes("$(")) return;
  for (const hp of ep.split(",")) {
    const host = hp.replace(/:\d+$/, "");
    const svc = serviceByHost(services, host);
    if (!svc) continue;
    const sel = svc.obj.spec?.selector;
    const target = templates.find((x) => labelsMatch(sel, x.template?.metadata?.labels) && (x.template?.spec?.containers ?? []).some((k) => (k.command ?? [])[0] === "musterd"));
    if (!target) continue;
    const m = (target.template.spec.containers ?? []).find((k) => (k.command ?? [])[0] === "musterd");
    const replicated = flag(m, "etcd-endpoints") !== undefined && (target.owner.spec?.replicas ?? 1) > 1;
    if (replicated && !(svc.obj.spec?.clusterIP === "None" && svc.obj.spec?.publishNotReadyAddresses)) problem(`${t.where}`, `--rdzv-endpoint=${ep}: Service ${svc.obj.metadata.name} reaches the leader only once it is ready; point agents at the headless Service that lists every replica`);
  }
}

function checkEtcd(t, c, objects, services) {
  const where = `${t.where} etcd`;
  const sts = t.owner;
  const name = sts.metadata?.name;
  const n = sts.spec?.replicas ?? 1;
  if (n % 2 === 0) problem(where, `replicas: ${n}: an even member count tolerates no more failures than ${n - 1}`);
  if (sts.spec?.podManagementPolicy !== "Parallel") problem(where, "podManagementPolicy must be Parallel: with OrderedReady member 0 waits for a readiness it cannot reach without a quorum");
  const peers = services.find(({ obj }) => obj.metadata?.name === sts.spec?.serviceName);
  if (!peers || peers.obj.spec?.clusterIP !== "None" || !peers.obj.spec?.publishNotReadyAddresses) problem(where, `serviceName "${sts.spec?.serviceName}" must be a headless Service with publishNotReadyAddresses: true (members find each other before they are ready)`);
  const nameFlag = (c.args ?? []).find((a) => String(a).startsWith("--name="));
  const nm = nameFlag && /^--name=\$\(([A-Za-z_]+)\)$/.exec(nameFlag);
  if (!nm || envSource(c, nm[1])?.valueFrom?.fieldRef?.fieldPath !== "metadata.name") problem(where, "--name must be the pod's name ($(POD_NAME) from fieldRef metadata.name)");
  const initial = flag(c, "initial-cluster");
  if (initial === undefined) problem(where, "needs --initial-cluster");
  else {
    const members = initial.split(",").map((e) => e.split("="));
    const want = Array.from({ length: n }, (_, i) => `${name}-${i}`);
    if (members.length !== n) problem(where, `--initial-cluster names ${members.length} member(s), replicas is ${n}`);
    const names = members.map(([m]) => m).sort();
    if (members.length === n && JSON.stringify(names) !== JSON.stringify(want)) problem(where, `--initial-cluster names ${names.join(", ")}; the members are ${want.join(", ")}`);
    for (const [m, url] of members) {
      const u = /^https?:\/\/([^/:]+):(\d+)$/.exec(url ?? "");
      if (!u || !u[1].startsWith(`${m}.${sts.spec?.serviceName}.`)) problem(where, `--initial-cluster: ${m}'s peer URL ${url} is not ${m}.${sts.spec?.serviceName}.<namespace>.svc:PORT`);
    }
  }
  const dataDir = flag(c, "data-dir");
  const claims = (sts.spec?.volumeClaimTemplates ?? []).map((v) => v.metadata?.name);
  const onClaim = dataDir !== undefined && (c.volumeMounts ?? []).some((m) => claims.includes(m.name) && (dataDir === m.mountPath || dataDir.startsWith(m.mountPath.replace(/\/?$/, "/"))));
  if (!onClaim) problem(where, `--data-dir ${dataDir} is not on a volumeClaimTemplate: a rescheduled member would come back empty`);
  const ops = flag(c, "max-txn-ops");
  if (ops !== undefined && Number(ops) < 128) problem(where, `--max-txn-ops=${ops}: musterd batches up to 128 operations a transaction`);
  const bytes = flag(c, "max-request-bytes");
  if (bytes !== undefined && Number(bytes) < 1572864) problem(where, `--max-request-bytes=${bytes}: musterd's requests reach 1.5 MiB (1572864)`);
  const live = c.livenessProbe?.httpGet?.path ?? "";
  if (c.livenessProbe && !/serializable=true/.test(live)) problem(where, `livenessProbe ${live || "(not /health?serializable=true)"}: a linearizable check fails on every member once the quorum is lost, and restarting them all makes it worse`);
  const quorum = Math.floor(n / 2) + 1;
  const pdb = objects.find(({ obj }) => obj.kind === "PodDisruptionBudget" && labelsMatch(obj.spec?.selector?.matchLabels, t.template?.metadata?.labels));
  const keeps = (p) => (p.minAvailable !== undefined ? Number(p.minAvailable) >= quorum : p.maxUnavailable !== undefined && Number(p.maxUnavailable) <= n - quorum);
  if (!pdb || !keeps(pdb.obj.spec ?? {})) problem(where, `needs a PodDisruptionBudget that keeps a quorum of ${quorum} (maxUnavailable: ${n - quorum})`);
}

// --- main

async function main(files) {
  if (files.length === 0) {
    console.error("usage: node validate.mjs FILE...");
    process.exit(2);
  }
  let total = 0;
  for (const file of files) {
    const objects = [];
    const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
    docs.forEach((doc, i) => {
      if (doc.errors.length) problem(`${file}#${i}`, `YAML: ${doc.errors[0].message}`);
      const obj = doc.toJS();
      if (obj) objects.push({ where: `${file}: ${obj.kind}/${obj.metadata?.name}`, obj });
    });
    for (const { where, obj } of objects) {
      if (!obj.apiVersion || !obj.kind || !obj.metadata?.name) {
        problem(where, "needs apiVersion, kind and metadata.name");
        continue;
      }
      if (obj.kind === "JobSet") {
        if (obj.apiVersion !== "jobset.x-k8s.io/v1alpha2") problem(where, `unknown JobSet version ${obj.apiVersion}`);
        strictWalk(`${where}.metadata`, obj.metadata, "V1ObjectMeta");
        customWalk(`${where}.spec`, obj.spec, kJobSetSpec);
        for (const [i, rj] of (obj.spec?.replicatedJobs ?? []).entries()) {
          if (!rj.name) problem(`${where}.spec.replicatedJobs[${i}]`, "needs a name");
          await validateSchema(`${where}.spec.replicatedJobs[${i}].template`, { apiVersion: "batch/v1", kind: "Job", metadata: { name: `${obj.metadata.name}-${rj.name}`, ...(rj.template?.metadata ?? {}) }, spec: rj.template?.spec });
        }
      } else if (obj.kind === "PyTorchJob") {
        if (obj.apiVersion !== "kubeflow.org/v1") problem(where, `unknown PyTorchJob version ${obj.apiVersion}`);
        strictWalk(`${where}.metadata`, obj.metadata, "V1ObjectMeta");
        customWalk(`${where}.spec`, obj.spec, kPyTorchJobSpec);
        for (const [role, rs] of Object.entries(obj.spec?.pytorchReplicaSpecs ?? {})) {
          await validateSchema(`${where}.spec.pytorchReplicaSpecs.${role}.template`, { apiVersion: "v1", kind: "Pod", metadata: { name: `${obj.metadata.name}-${role.toLowerCase()}-0`, ...(rs.template?.metadata ?? {}) }, spec: rs.template?.spec });
          const names = (rs.template?.spec?.containers ?? []).map((c) => c.name);
          if (!names.includes("pytorch")) problem(`${where}.spec.pytorchReplicaSpecs.${role}`, 'the operator configures the container named "pytorch"; there is none');
        }
      } else {
        await validateSchema(where, obj);
        const type = builtinType(obj.apiVersion, obj.kind);
        if (!type) problem(where, `unknown type ${obj.apiVersion} ${obj.kind}`);
        else strictWalk(where, obj, type);
      }
    }
    checkMuster(objects);
    total += objects.length;
    const kinds = [...new Set(objects.map(({ obj }) => obj.kind))].join(", ");
    console.log(`${file}: ${objects.length} object(s): ${kinds}`);
  }
  if (problems.length) {
    for (const p of problems) console.log(`INVALID ${p}`);
    console.log(`${problems.length} problem(s) in ${total} object(s)`);
    process.exit(1);
  }
  console.log(`all ${total} object(s) valid`);
}

await main(process.argv.slice(2));
