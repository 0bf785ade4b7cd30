"""Run a GitHub Actions workflow's own `run:` steps on this machine, in order, each job in a fresh copy of the
working tree with a fresh venv, on this machine's engine.

What cannot run here is substituted, and every substitution is recorded, never silent:
- GitHub contexts and secrets: `${{ ... }}` expressions take values from a table the caller gives; an
  expression missing from it is an error;
- actions (`uses:`): the four this project uses are emulated (see ACTIONS); any other one is an error;
- a job matrix: only the entries the caller keeps run;
- text the caller drops from a step (`--require-gpu`, for a machine without a GPU);
- a step whose whole `run:` text the caller names in `stand_ins` (what already ran elsewhere, with why): recorded
  with its reason instead of run; a step whose text changed no longer matches and runs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")
# What each action does on GitHub, and what stands in for it here.
ACTIONS = {
    "actions/checkout": "emulated: the job runs in a fresh copy of the working tree (tracked and untracked files that git "
                        "does not ignore)",
    "actions/setup-python": "emulated: this machine's python3 stands in; its major.minor must be the requested version",
    "actions/upload-artifact": "emulated: the files under `path` are kept under the artifact's name for later jobs",
    "actions/download-artifact": "emulated: the kept artifacts matching `pattern` are copied into `path`",
}


class WorkflowError(Exception):
    """The workflow asks for something this runner cannot stand in for."""


@dataclass
class StepRun:
    job: str
    name: str
    kind: str  # "run" or "action"
    returncode: int
    output: str
    note: str = ""
    seconds: float = 0.0


@dataclass
class WorkflowRun:
    steps: list[StepRun] = field(default_factory=list)
    substitutions: list[str] = field(default_factory=list)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)  # job -> outputs
    workdirs: dict[str, Path] = field(default_factory=dict)  # job (or job[entry]) -> its checkout

    def failed(self) -> list[StepRun]:
        return [s for s in self.steps if s.returncode != 0]

    def describe(self) -> str:
        lines = [f"{s.job}: {s.kind} {s.name!r}: rc {s.returncode} in {s.seconds:.0f} s{' (' + s.note + ')' if s.note else ''}"
                 for s in self.steps]
        return "\n".join(lines + [f"substituted: {s}" for s in self.substitutions])


@dataclass
class Runner:
    """Runs workflows from `root` in `workspace`; `context` gives the value of each `${{ }}` expression."""

    root: Path
    workspace: Path
    context: dict[str, str]
    env: dict[str, str]  # the runner machine's environment
    drop: tuple[str, ...] = ()  # text removed from run steps
    stand_ins: dict[str, str] = field(default_factory=dict)  # a step's whole run text -> why it is not run here
    keep_entry: Callable[[dict], bool] = lambda _: True  # which job-matrix entries run
    timeout: float = 3600
    run: WorkflowRun = field(default_factory=WorkflowRun)

    def workflow(self, path: Path) -> WorkflowRun:
        document = yaml.safe_load(path.read_text())
        for name in job_order(document["jobs"]):
            self.job(name, document["jobs"][name])
        return self.run

    def job(self, name: str, job: dict) -> None:
        matrix = job.get("strategy", {}).get("matrix")
        if matrix is None:
            self.job_run(name, job, {})
            return
        if set(matrix) != {"include"}:
            raise WorkflowError(f"job {name}: only `matrix: include:` is emulated")
        entries = self.value(matrix["include"], {})
        kept = [e for e in entries if self.keep_entry(e)]
        self.run.substitutions.append(f"job {name}: {len(kept)} of {len(entries)} matrix entries run here: {kept}")
        for entry in kept:
            platform = f"-{entry['arch']}" if "arch" in entry else ""  # a job per entry and platform
            self.job_run(f"{name}[{entry.get('entry', entry)}{platform}]", job, entry)

    def job_run(self, name: str, job: dict, matrix: dict) -> None:
        if job.get("if") not in (None, "always()"):
            raise WorkflowError(f"job {name}: `if: {job['if']}` is not emulated")
        runs_on = job.get("runs-on")
        if runs_on != "ubuntu-latest":
            self.run.substitutions.append(f"job {name}: runs-on {runs_on} -> this machine")
        workdir = self.workspace / re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        self.run.workdirs[name] = workdir
        outputs_file = self.workspace / f"{workdir.name}.output"
        env_file = self.workspace / f"{workdir.name}.env"
        env = {**self.env, "GITHUB_OUTPUT": str(outputs_file), "GITHUB_ENV": str(env_file),
               "GITHUB_WORKSPACE": str(workdir), "CI": "true", "GITHUB_ACTIONS": "true"}
        step_outputs: dict[str, dict[str, str]] = {}
        failed = False
        for index, step in enumerate(job["steps"]):
            if failed and step.get("if") != "always()":
                continue
            label = step.get("name") or step.get("uses") or f"step {index}"
            local = {"matrix": matrix, "steps": step_outputs}
            if "uses" in step:
                record = self.action(name, label, step, workdir, local)
            else:
                outputs_file.write_text("")
                env_file.write_text("")
                step_env = {**env, **{k: str(self.value(v, local)) for k, v in step.get("env", {}).items()}}
                script = str(self.value(step["run"], local))
                if script.strip() in self.stand_ins:
                    record = StepRun(name, label, "run", 0, "", f"not run: {self.stand_ins[script.strip()]}")
                    self.run.substitutions.append(f"job {name}: step {label!r} {record.note}")
                else:
                    record = self.shell(name, label, script, workdir, step_env)
                if "id" in step:
                    step_outputs[step["id"]] = parse_outputs(outputs_file.read_text())
                env.update(parse_outputs(env_file.read_text()))  # GITHUB_ENV: the job's later steps see it
            self.run.steps.append(record)
            failed = failed or record.returncode != 0
        self.run.outputs[name] = {k: str(self.value(v, {"steps": step_outputs})) for k, v in job.get("outputs", {}).items()}
        self.context.update({f"needs.{name}.outputs.{k}": v for k, v in self.run.outputs[name].items()})

    def shell(self, job: str, label: str, script: str, workdir: Path, env: dict[str, str]) -> StepRun:
        note = []
        for text in self.drop:
            if text in script:
                script = script.replace(text, "")
                note.append(f"dropped {text}")
        # GitHub's default shell for `run:` on Linux runners.
        started = time.monotonic()
        result = subprocess.run(["bash", "--noprofile", "--norc", "-e", "-c", script], cwd=workdir, env=env,
                                capture_output=True, text=True, timeout=self.timeout, check=False)
        return StepRun(job, label, "run", result.returncode, result.stdout + result.stderr, "; ".join(note),
                       time.monotonic() - started)

    def action(self, job: str, label: str, step: dict, workdir: Path, local: dict) -> StepRun:
        action = step["uses"].split("@")[0]
        if action not in ACTIONS:
            raise WorkflowError(f"job {job}: action {action} has no stand-in here")
        inputs = {key: self.value(value, local) for key, value in step.get("with", {}).items()}
        output = ""
        if action == "actions/checkout":
            copy_tree(self.root, workdir)
        elif action == "actions/setup-python":
            here = f"{sys.version_info.major}.{sys.version_info.minor}"
            wanted = str(inputs["python-version"])
            if here != wanted:
                return StepRun(job, label, "action", 1, f"python {here} here, the workflow asks for {wanted}")
        elif action == "actions/upload-artifact":
            name = str(inputs["name"])
            source = workdir / inputs["path"]
            if source.exists():
                shutil.copytree(source, self.workspace / "artifacts" / name, dirs_exist_ok=True)
            output = f"kept {source} as {name}" if source.exists() else f"nothing at {source}"
        elif action == "actions/download-artifact":
            target = workdir / inputs["path"]
            target.mkdir(parents=True, exist_ok=True)
            pattern = re.compile(inputs["pattern"].replace("*", ".*") + "$")
            for artifact in sorted((self.workspace / "artifacts").glob("*")):
                if pattern.match(artifact.name):
                    shutil.copytree(artifact, target if inputs.get("merge-multiple") else target / artifact.name,
                                    dirs_exist_ok=True)
                    output += f"{artifact.name} -> {target}\n"
        return StepRun(job, label, "action", 0, output, ACTIONS[action])

    def value(self, template: object, local: dict) -> object:
        """`template` with its `${{ }}` expressions replaced; a whole-value fromJSON(...) gives the parsed JSON."""
        if not isinstance(template, str):
            return template
        whole = EXPRESSION.fullmatch(template.strip())
        if whole and whole.group(1).startswith("fromJSON("):
            return json.loads(str(self.lookup(whole.group(1)[len("fromJSON("):-1], local)))
        return EXPRESSION.sub(lambda m: str(self.lookup(m.group(1), local)), template)

    def lookup(self, expression: str, local: dict) -> object:
        head, _, rest = expression.partition(".")
        if head == "matrix" and rest in local.get("matrix", {}):
            return local["matrix"][rest]
        if head == "steps":
            step, _, key = rest.partition(".outputs.")
            if key in local.get("steps", {}).get(step, {}):
                return local["steps"][step][key]
        if expression in self.context:
            return self.context[expression]
        raise WorkflowError(f"no value for the expression ${{{{ {expression} }}}}")


def job_order(jobs: dict) -> list[str]:
    """Jobs in an order that respects `needs`."""
    done: list[str] = []
    while len(done) < len(jobs):
        ready = [n for n, j in jobs.items() if n not in done and set(as_list(j.get("needs"))) <= set(done)]
        if not ready:
            raise WorkflowError(f"jobs with unmet needs: {sorted(set(jobs) - set(done))}")
        done += ready
    return done


def as_list(value: object) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def parse_outputs(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def copy_tree(root: Path, target: Path) -> None:
    """The files a checkout of this working tree holds: tracked and untracked ones that git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    target.mkdir(parents=True)
    archive = target.parent / f"{target.name}.tar"
    with tarfile.open(archive, "w") as tar:
        for name in filter(None, listed):
            if (root / name).exists():
                tar.add(root / name, arcname=name, recursive=False)
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="tar")
    archive.unlink()
    target.chmod(0o755)
