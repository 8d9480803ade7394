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
//     command defined.
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
    if (obj.kind === "Deployment" || obj.kind === "Job") {
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
    }
    const agent = (spec.containers ?? []).find((c) => (c.command ?? [])[0] === "muster");
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
