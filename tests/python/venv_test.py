"""A worker run by a virtual environment's Python under muster: made with
``python3 -m venv`` (no system site packages), its interpreter found on PATH
as an activated environment's is, it imports ``muster`` from the directory the
launcher adds (the package's own, holding nothing else) and uses musterd's
Store through the package's own gRPC client, while none of Debian's
packages (/usr/lib/python3/dist-packages: grpcio, protobuf, torch 1.13,
numpy) is on its sys.path. torch is not in the environment, so
``import muster.torch`` fails, with an error that names the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

import pytest

import harness

DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"

WORKER = r'''
import importlib.util, json, os, sys
report = {"executable": sys.executable, "prefix": sys.prefix,
          "base_prefix": sys.base_prefix, "path": sys.path,
          "pythonpath": os.environ.get("PYTHONPATH", "")}
import muster
from muster import _client
report["muster_file"] = muster.__file__
report["version"] = muster.__version__
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
c = _client.StoreClient.from_env(os.environ)
c.set(f"venv/{rank}", f"hello from rank {rank}".encode())
report["got"] = [c.get(f"venv/{r}", 60).decode() for r in range(world)]
report["importable"] = [m for m in ("grpc", "google", "numpy", "torch")
                        if importlib.util.find_spec(m) is not None]
try:
    import muster.torch
    report["torch_error"] = ""
except ImportError as e:
    report["torch_error"] = str(e)
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
'''


@pytest.fixture(scope="module")
def venv() -> str:
    """A virtual environment of Debian's python3 without system site
    packages (and without pip: nothing is installed into it)."""
    directory = os.path.join(tempfile.mkdtemp(prefix="muster-venv-"), "env")
    try:
        made = subprocess.run(
            ["/usr/bin/python3", "-m", "venv", "--without-pip", directory],
            capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        pytest.skip("no /usr/bin/python3")
    if made.returncode != 0 or not os.path.exists(
            os.path.join(directory, "bin", "python3")):
        pytest.skip("python3 -m venv cannot make an environment here "
                    f"({made.stderr.strip()[-300:]}): install Debian's "
                    "python3-venv (scripts/install-deps.sh)")
    return directory


def run_job(venv: str, out: str, nproc: int) -> Dict[int, Dict[str, Any]]:
    """muster --nproc-per-node=NPROC worker.py in the activated environment
    against a real musterd; the workers' reports by rank."""
    musterd = harness.Musterd()
    try:
        script = os.path.join(out, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHON_EXEC", "PYTHONHOME")}
        env.update(VIRTUAL_ENV=venv, PATH=os.path.join(venv, "bin") +
                   os.pathsep + env.get("PATH", "/usr/bin:/bin"))
        job = harness.Child(
            [os.path.join(harness.BIN_DIR, "muster"), "--nnodes=1",
             f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
             f"--rdzv-endpoint={musterd.endpoint}", "--rdzv-id=venvjob",
             script, out], env=env, tag="venv")
        try:
            code = job.wait(120)
        finally:
            job.kill()
        assert code == 0, job.output()
        reports = {}
        for rank in range(nproc):
            with open(os.path.join(out, f"rank{rank}.json")) as f:
                reports[rank] = json.load(f)
        return reports
    finally:
        musterd.kill()


class VenvTest:
    def test_venv_worker_imports_muster_without_system_packages(
            self, venv: str) -> None:
        out = tempfile.mkdtemp(prefix="muster-venv-out-")
        reports = run_job(venv, out, 2)
        package_dir = os.path.realpath(os.environ["MUSTER_PYTHON_DIR"])
        for rank, r in reports.items():
            # The environment's interpreter, not the one it was made from.
            assert r["prefix"] != r["base_prefix"], r
            assert r["executable"].startswith(venv), r
            # The launcher added the package's own directory, and only it.
            assert r["pythonpath"] == package_dir, r
            assert r["muster_file"].startswith(package_dir + os.sep), r
            # No system package directory on the path.
            path: List[str] = r["path"]
            assert DEBIAN_DIST_PACKAGES not in path, path
            assert not [p for p in path if "dist-packages" in p], path
            # The Store of the real musterd, with no grpcio or protobuf.
            assert r["got"] == ["hello from rank 0", "hello from rank 1"], r
            assert r["importable"] == [], r
            # muster.torch names the fix.
            assert "install torch" in r["torch_error"], r
            assert "muster --python=PATH" in r["torch_error"], r
            print(f"rank {rank}: sys.path {path}")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
