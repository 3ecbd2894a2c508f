"""The competitors' virtual environments of the side-by-side benchmarks.

Anchors are never installed into the project's venv: each lives in a venv of its own under
``$EVOTENSOR_BENCH_VENVS`` (default ``<repo>/.bench/venvs``, git-ignored), one per group below. The
benchmark scripts find a group's Python with :func:`venv_python`; ``make bench-venvs`` (this file run
as a script) creates the groups, or only those named: ``make bench-venvs VENVS="es qd"``.

The versions are those the figures in ``benchmarks/results_*.md`` were measured with. The torch
anchors use the CPU wheel of PyTorch (``--index-url https://download.pytorch.org/whl/cpu``).

Two groups install a project that has no usable release on PyPI from a pinned commit of its source
(:data:`SOURCES`): ``tensorneat`` (TensorNEAT has never been published there), ``qd051`` (QDax
0.5.1, whose PGA-ME runs on the current brax; PyPI's 0.5.0 imports ``brax.v1``) and ``neat21``
(neat-python 2.1.0, whose version string is in its repository but not on PyPI, where the newest
release is 2.0.0: that one is the ``neat`` group). The commit is exported with ``git archive`` from
a local git directory found under ``$EVOTENSOR_BENCH_SOURCES`` (default: ``.mirror`` beside the
checkout; ``<owner>+<name>/repo``, ``<owner>+<name>`` or ``<name>``, bare or not) into a temporary
folder outside the repository and pip-installed from there; without a local copy pip installs
``git+<url>@<commit>``. The source is never copied into the repository. After each install the
group's ``pip freeze`` (and the commit, for a source group) is written to ``<venv>/versions.txt``.

``bench_venvs.py --export GROUP DIR`` only exports a source group's pinned files into ``DIR``
(git-ignored, e.g. ``.bench/tensorneat_src``), for the GPU machine, which has no network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# group -> pip arguments
VENVS: dict[str, list[str]] = {
    "es": ["evosax==0.3.2", "jax==0.10.2", "jaxlib==0.10.2"],
    # neat-python 2.1.0 is not on PyPI (newest there: 2.0.0); "neat21" installs it from source, with
    # gymnasium for neat_cartpole.py's neat-python engines (CartPole-v1)
    "neat": ["neat-python==2.0.0"],
    "neat21": ["gymnasium==1.3.0"],
    # TensorNEAT (its own dependencies: brax, gymnax, mujoco, flax, ...) with the project's JAX (CPU
    # jaxlib; TensorNEAT asks for jax>=0.4.28). gymnax 0.0.9: TensorNEAT's GymNaxEnv unpacks the
    # 5-tuple `step` of gymnax < 1.0 (1.0 returns terminated and truncated apart); `six`: see control
    "tensorneat": ["jax==0.10.2", "jaxlib==0.10.2", "gymnax==0.0.9", "six"],
    "evotorch": ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "torch", "evotorch==0.6.1"],
    "evox": ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "torch", "evox==1.4.0"],
    "gp": ["gplearn==0.4.3", "pyoperon==0.6.2", "deap==1.4.4"],
    "qd": ["ribs==0.12.0", "qdax==0.5.0", "jax==0.10.2", "jaxlib==0.10.2"],
    # pyribs' Discount Model Search trains its discount model with PyTorch (CPU wheel)
    "dms": ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "torch", "ribs==0.12.0"],
    # QDax 0.5.1 from source: PyPI's 0.5.0 PGA-ME imports brax.v1, which brax >= 0.11 no longer has
    "qd051": ["jax==0.10.2", "jaxlib==0.10.2"],
    "tree": ["DI-treetensor==0.5.0", "tianshou"],
}

# groups installed without the project's constraint file (``make`` exports it as PIP_CONSTRAINT for
# every pip call): it pins gymnax 1.0.1, whose 6-tuple ``step`` TensorNEAT cannot use
UNCONSTRAINED = {"tensorneat"}


@dataclass(frozen=True)
class Source:
    """A pinned commit of a project's repository, installed from a ``git archive`` of ``paths``."""

    repo: str  # owner/name on GitHub
    commit: str
    paths: tuple[str, ...]

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}"


# group -> the source installed into it, beside the pip arguments of VENVS
SOURCES: dict[str, Source] = {
    # neat-python's master of 2026-04-10, version 2.1.0 (untagged; no PyPI release)
    "neat21": Source(
        "CodeReclaimers/neat-python",
        "0b92b9d0c239c5896544e8c87521d0eba4ced0e2",
        ("pyproject.toml", "README.md", "LICENSE", "neat"),
    ),
    # QDax's main of 2025-10-30 (tag v0.5.1, not on PyPI)
    "qd051": Source(
        "adaptive-intelligent-robotics/QDax",
        "46b8feecae26d79414ce7a1ce731e5cfbeb9837d",
        ("pyproject.toml", "README.md", "LICENSE", "qdax"),
    ),
    # pymap_elites' master of 2020-12-14 (never released; its setup.py installs no package): not a
    # venv group, benchmarks/qd_multitask.py exports it into a temporary folder and imports it
    "pymap": Source(
        "resibots/pymap_elites",
        "d9cb18774ea154a03aa52a99679be53fcf94a24f",
        ("README.md", "COPYING", "map_elites", "examples"),
    ),
    # TensorNEAT's main of 2026-05-02 (pyproject version 0.1.0)
    "tensorneat": Source(
        "EMI-Group/tensorneat",
        "ee204900e8e55ffe0ed756651ea871c70230dd34",
        ("pyproject.toml", "README.md", "LICENSE", "src"),
    ),
}


def sources_root() -> str:
    return os.environ.get("EVOTENSOR_BENCH_SOURCES") or os.path.join(os.path.dirname(ROOT), ".mirror")


def local_git_dir(source: Source) -> str | None:
    """A git directory under :func:`sources_root` that holds ``source.commit``, or None."""
    owner, name = source.repo.split("/")
    root = sources_root()
    for candidate in (f"{owner}+{name}/repo", f"{owner}+{name}", name, f"{name}.git"):
        path = os.path.join(root, candidate)
        if not os.path.isdir(path):
            continue
        for git_dir in (path, os.path.join(path, ".git")):
            found = subprocess.run(
                ["git", "--git-dir", git_dir, "cat-file", "-e", f"{source.commit}^{{commit}}"],
                capture_output=True,
            )
            if found.returncode == 0:
                return git_dir
    return None


def export_source(source: Source, into: str) -> str:
    """Write ``source``'s files at its commit into a new folder under ``into``; return the folder."""
    git_dir = local_git_dir(source)
    if git_dir is None:
        return f"git+{source.url}.git@{source.commit}"
    folder = os.path.join(into, source.repo.replace("/", "+"))
    os.makedirs(folder)
    archive = subprocess.run(
        ["git", "--git-dir", git_dir, "archive", "--format=tar", source.commit, *source.paths],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def venv_root() -> str:
    return os.environ.get("EVOTENSOR_BENCH_VENVS") or os.path.join(ROOT, ".bench", "venvs")


def venv_python(group: str) -> str:
    """The Python of competitor venv ``group`` (one of :data:`VENVS`); it may not exist yet."""
    if group not in VENVS:
        raise ValueError(f"unknown benchmark venv {group!r}; known: {', '.join(VENVS)}")
    return os.path.join(venv_root(), group, "bin", "python")


def machine() -> str:
    """The CPU model (from ``/proc/cpuinfo`` where there is one), the core count and the OS."""
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def stamp() -> str:
    """The first line of a side-by-side table: UTC time, machine, CPU count and load average."""
    import platform
    import time

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"{when}, {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()}"


def alternating(impls: list[str], seeds: int):
    """``(seed, impl)`` for every seed, the libraries in turn and their order reversed every other
    seed (so that neither always runs first on a warming machine)."""
    for seed in range(seeds):
        for impl in impls if seed % 2 == 0 else impls[::-1]:
            yield seed, impl


def run_json_worker(python: str, script: str, args: list[str]) -> dict:
    """Run ``python script *args`` (a benchmark's worker, on the CPU) from the benchmarks folder and
    return the JSON object on its last line of output; a failed worker raises with its stderr."""
    out = subprocess.run(
        [python, os.path.abspath(script), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )
    if out.returncode != 0:
        raise RuntimeError(f"{os.path.basename(script)} {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def create(groups: list[str]) -> None:
    for group in groups or list(VENVS):
        python = venv_python(group)
        venv = os.path.dirname(os.path.dirname(python))
        if not os.path.exists(python):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
        tmp = tempfile.mkdtemp(prefix=f"evotensor-bench-{group}-")
        try:
            source = SOURCES.get(group)
            extra = [export_source(source, tmp)] if source else []
            env = dict(os.environ)
            if group in UNCONSTRAINED:
                env.pop("PIP_CONSTRAINT", None)
            pip = [python, "-m", "pip", "install", "--quiet", *VENVS[group], *extra]
            subprocess.run(pip, check=True, env=env)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        freeze = subprocess.run([python, "-m", "pip", "freeze"], check=True, capture_output=True, text=True)
        with open(os.path.join(venv, "versions.txt"), "w") as f:
            if source:
                origin = local_git_dir(source) or source.url
                f.write(f"# {source.repo} @ {source.commit}, exported from {origin}\n")
            f.write(freeze.stdout)
        print(f"{group}: {python}")


def export_for_device(group: str, into: str) -> str:
    """``group``'s pinned source exported from the local git copy into ``into`` (emptied first),
    for a machine without a network where its dependencies are already installed (the GPU
    session's ``benchmarks/gpu_neat_tensorneat.sh`` puts ``<into>/src`` on ``PYTHONPATH``)."""
    if group not in SOURCES:
        raise SystemExit(f"--export: {group!r} is not a source group; source groups: {', '.join(SOURCES)}")
    source = SOURCES[group]
    if local_git_dir(source) is None:
        raise SystemExit(f"no local git copy of {source.repo} under {sources_root()} (fetch it first)")
    shutil.rmtree(into, ignore_errors=True)
    os.makedirs(into)
    folder = export_source(source, into)
    for name in os.listdir(folder):
        os.replace(os.path.join(folder, name), os.path.join(into, name))
    os.rmdir(folder)
    with open(os.path.join(into, "COMMIT"), "w") as f:
        f.write(f"{source.repo} {source.commit}\n")
    return into


if __name__ == "__main__":
    if sys.argv[1:2] == ["--export"]:  # bench_venvs.py --export GROUP DIR
        print(export_for_device(sys.argv[2], sys.argv[3]))
    else:
        create(sys.argv[1:])
