#!/usr/bin/python3
"""Runs a rendered Indexed Job's pods on this machine, as Kubernetes would run them.

    simulate_job.py --manifests RENDERED.yaml --root ROOT [--timeout 240]

From the rendered manifests (`kubectl kustomize k8s/base`) it takes the Indexed Job, its pod
template's container running muster, and the Service that container reaches musterd through.
It starts a musterd (ROOT/usr/bin/musterd) on 127.0.0.1, then N = completions copies of the
container, concurrently, each with:
  - the container's exact command, args and env, expanded as the kubelet does: env entries in
    order, $(VAR) references to earlier entries, $$ for a literal $, unknown references left as
    they are; valueFrom.fieldRef filled in as the API server would for that pod (the Job's
    labels and annotations, the pod name, namespace and IP);
  - what the Job controller adds: JOB_COMPLETION_INDEX=0..N-1 and the pod's hostname;
and these substitutions, which stand in for the cluster:
  - the names of every Service of musterd's pods (musterd, musterd.NS, musterd.NS.svc[.cluster.local];
    with replicated musterd also the headless musterd-replicas) with their port become 127.0.0.1
    and the local musterd's port: one musterd stands in for the replicas, whose failover this
    does not simulate (the e2e tests of replica mode do);
  - absolute paths of the image (/usr/...) resolve under ROOT, the installed muster tree, and
    PATH starts with ROOT/usr/bin;
  - PET_LOCAL_ADDR=127.0.0.1 and MUSTER_SOCKET_IFNAME=lo: each pod would advertise and bind its
    own pod IP; here all pods share the loopback interface (no traffic leaves it).
The Job succeeds when every pod exits 0 before the deadline; then exit 0. Otherwise the pods
are killed (their process groups), their output is printed, and the exit status is 1.
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import yaml

NAMESPACE = "default"


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def find_job(docs):
    jobs = [d for d in docs if d.get("kind") == "Job" and d.get("spec", {}).get("completionMode") == "Indexed"]
    if len(jobs) != 1:
        fail(f"expected one Indexed Job in the manifests, found {len(jobs)}")
    return jobs[0]


def find_agent_container(job):
    containers = job["spec"]["template"]["spec"]["containers"]
    for c in containers:
        if (c.get("command") or [None])[0] == "muster":
            return c
    fail("no container of the Job runs muster")


def musterd_services(docs):
    """The Services selecting the pods of the Deployment that runs musterd: [(name, port)]."""
    found = []
    for d in docs:
        if d.get("kind") != "Deployment":
            continue
        tmpl = d["spec"]["template"]
        if not any((c.get("command") or [None])[0] == "musterd" for c in tmpl["spec"]["containers"]):
            continue
        labels = tmpl["metadata"].get("labels", {})
        for s in docs:
            sel = s.get("spec", {}).get("selector") if s.get("kind") == "Service" else None
            if sel and all(labels.get(k) == v for k, v in sel.items()):
                found.append((s["metadata"]["name"], s["spec"]["ports"][0]["port"]))
    if not found:
        fail("no Service selects a musterd Deployment in the manifests")
    return found


def expand(text, env):
    """$(VAR) expansion as the kubelet does it (k8s.io/kubernetes/third_party/forked/golang/expansion)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i):
            end = text.find(")", i + 2)
            name = text[i + 2:end] if end >= 0 else None
            if name is not None and name in env:
                out.append(env[name])
                i = end + 1
            elif name is not None:
                out.append(text[i:end + 1])
                i = end + 1
            else:
                out.append(text[i:])
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def field_ref(path, pod):
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        values = pod[m.group(1)]
        if m.group(2) not in values:
            fail(f"fieldRef {path}: the pod would have no such {m.group(1)[:-1]}")
        return values[m.group(2)]
    simple = {"metadata.name": pod["name"], "metadata.namespace": NAMESPACE, "status.podIP": "127.0.0.1",
              "status.hostIP": "127.0.0.1", "spec.nodeName": socket.gethostname(),
              "metadata.uid": pod["uid"], "spec.serviceAccountName": "default"}
    if path not in simple:
        fail(f"fieldRef {path} is not simulated")
    return simple[path]


def pod_environment(job, container, index, services, local_endpoint, root):
    name = job["metadata"]["name"]
    uid = f"00000000-0000-4000-8000-{index:012d}"
    tmpl_meta = job["spec"]["template"].get("metadata", {})
    pod = {
        "name": f"{name}-{index}-sim",
        "uid": uid,
        # What the Job controller puts on its pods, and the template's own.
        "labels": {**tmpl_meta.get("labels", {}), "job-name": name, "batch.kubernetes.io/job-name": name,
                   "controller-uid": uid, "batch.kubernetes.io/controller-uid": uid,
                   "batch.kubernetes.io/job-completion-index": str(index)},
        "annotations": {**tmpl_meta.get("annotations", {}), "batch.kubernetes.io/job-completion-index": str(index)},
    }
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(str(e["value"]), env)
        elif "fieldRef" in e.get("valueFrom", {}):
            env[e["name"]] = field_ref(e["valueFrom"]["fieldRef"]["fieldPath"], pod)
        else:
            fail(f"env {e['name']}: valueFrom {list(e.get('valueFrom', {}))} is not simulated")
    # The Job controller adds JOB_COMPLETION_INDEX to every container of an Indexed Job.
    env.setdefault("JOB_COMPLETION_INDEX", str(index))
    command = [expand(str(a), env) for a in container.get("command", []) + container.get("args", [])]
    # The cluster's names for musterd -> the local one.
    patterns = []
    for svc_name, svc_port in services:
        names = [f"{svc_name}.{NAMESPACE}.svc.cluster.local", f"{svc_name}.{NAMESPACE}.svc", f"{svc_name}.{NAMESPACE}", svc_name]
        patterns.append(re.compile(r"(?<![\w.-])(" + "|".join(re.escape(n) for n in names) + rf"):{svc_port}(?![\w.-])"))

    def local(text):
        for pattern in patterns:
            text = pattern.sub(local_endpoint, text)
        if text.startswith("/") and os.path.exists(root + text):
            text = root + text
        return text

    command = [local(a) for a in command]
    env = {k: local(v) for k, v in env.items()}
    return pod, command, env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifests", required=True)
    ap.add_argument("--root", required=True, help="the installed tree standing in for the image")
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args()
    root = os.path.abspath(args.root)

    with open(args.manifests) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    job = find_job(docs)
    container = find_agent_container(job)
    spec = job["spec"]
    n = spec["completions"]
    if spec.get("parallelism", 1) < n:
        fail(f"parallelism {spec.get('parallelism')} < completions {n}: the pods would not all run at once")
    services = musterd_services(docs)
    named = ", ".join(f"{name}:{port}" for name, port in services)
    print(f"Job {job['metadata']['name']}: {n} pods (completionMode Indexed), musterd Service(s) {named}", flush=True)

    work = tempfile.mkdtemp(prefix="muster-job-sim.")
    procs = []
    musterd = None
    deadline = time.monotonic() + args.timeout
    try:
        port_file = os.path.join(work, "musterd.port")
        musterd_log = open(os.path.join(work, "musterd.log"), "w")
        musterd = subprocess.Popen([f"{root}/usr/bin/musterd", "--listen=127.0.0.1:0", f"--port-file={port_file}"],
                                   stdout=musterd_log, stderr=subprocess.STDOUT, start_new_session=True)
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if musterd.poll() is not None or time.monotonic() > deadline:
                fail("musterd did not start")
            time.sleep(0.05)
        endpoint = f"127.0.0.1:{open(port_file).read().strip()}"
        print(f"musterd (standing in for Service(s) {named}) on {endpoint}", flush=True)

        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "MUSTER_", "TORCHELASTIC_"))}
        for index in range(n):
            pod, command, env = pod_environment(job, container, index, services, endpoint, root)
            full_env = {**base_env, **env, "HOSTNAME": f"{job['metadata']['name']}-{index}",
                        "PATH": f"{root}/usr/bin:{base_env.get('PATH', '/usr/bin:/bin')}",
                        "PET_LOCAL_ADDR": "127.0.0.1", "MUSTER_SOCKET_IFNAME": "lo"}
            print(f"pod {pod['name']} (JOB_COMPLETION_INDEX={index}):", flush=True)
            print("  env: " + " ".join(f"{k}={v}" for k, v in env.items()), flush=True)
            print("  command: " + " ".join(command), flush=True)
            log = open(os.path.join(work, f"pod-{index}.log"), "w")
            procs.append((index, subprocess.Popen(command, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                                  start_new_session=True), log.name))

        codes = {}
        while len(codes) < n and time.monotonic() < deadline:
            for index, p, _ in procs:
                if index not in codes and p.poll() is not None:
                    codes[index] = p.returncode
            time.sleep(0.05)
        ok = len(codes) == n and all(c == 0 for c in codes.values())
        for index, p, log in procs:
            with open(log) as f:
                text = f.read()
            status = codes.get(index, "still running at the deadline")
            print(f"--- pod {index}: exit {status}", flush=True)
            lines = text.splitlines()
            shown = lines if not ok else [l for l in lines if l.startswith("rank ") or "succeeded" in l]
            for line in shown[-60:]:
                print(f"  {line}")
        if not ok:
            with open(musterd_log.name) as f:
                print("--- musterd\n" + f.read())
            fail(f"the Job did not succeed: exit codes {codes} of {n} pods")
        print(f"Job succeeded: {n} of {n} pods exited 0", flush=True)
    finally:
        for _, p, _ in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if musterd is not None:
            if musterd.poll() is None:
                musterd.send_signal(signal.SIGTERM)
                try:
                    musterd.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(musterd.pid, signal.SIGKILL)
                    musterd.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
