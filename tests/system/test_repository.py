"""The repository's own habits: the files a contributor's tools read agree with the Makefile and .ci/run.

CI runs the workflow's jobs as .ci/run's, pre-commit's hooks as ``make lint``'s parts, and Read the
Docs as ``make docs``: each pair is checked here, so neither side can drift from the other.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import metadata
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _ci_jobs() -> list[str]:
    match = re.search(r'^JOBS="([^"]+)"', (ROOT / ".ci" / "run").read_text(), re.M)
    assert match, ".ci/run names its jobs in JOBS"
    return match.group(1).split()


def _make_prerequisites(target: str) -> list[str]:
    match = re.search(rf"^{target}:([^\n]*)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, f"no make target {target}"
    return match.group(1).split()


def test_every_ci_job_is_defined_and_the_workflow_runs_each_through_the_makefile() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    jobs = _ci_jobs()
    assert all(re.search(rf"^job_{re.escape(job)}\(\)", run, re.M) for job in jobs)
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    (ci,) = workflow["jobs"].values()
    assert ci["strategy"]["matrix"]["job"] == jobs
    assert ci["steps"][-1]["run"] == "make ci JOB=${{ matrix.job }}"
    assert _make_prerequisites("ci") == [] and "bash .ci/run $(JOB)" in (ROOT / "Makefile").read_text()


def test_the_workflow_is_valid_for_github_actions() -> None:
    checked = subprocess.run(
        [BIN / "check-jsonschema", "--builtin-schema", "vendor.github-workflows", ".github/workflows/ci.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_pre_commit_runs_exactly_make_lints_parts() -> None:
    validated = subprocess.run(
        [BIN / "pre-commit", "validate-config", ".pre-commit-config.yaml"], cwd=ROOT, capture_output=True, check=False
    )
    assert validated.returncode == 0, validated.stdout + validated.stderr
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert all(hook["language"] == "system" and not hook["pass_filenames"] for hook in hooks)
    assert [hook["entry"] for hook in hooks] == [f"make -s {part}" for part in _make_prerequisites("lint")]


def test_read_the_docs_builds_what_make_docs_builds() -> None:
    config = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text())
    assert config["version"] == 2
    assert (ROOT / config["sphinx"]["configuration"]).is_file()
    assert config["sphinx"]["fail_on_warning"] is True  # make docs: sphinx-build -W
    (install,) = config["python"]["install"]
    extras = metadata("django-semaphore").get_all("Provides-Extra") or []
    assert install["path"] == "." and install["extra_requirements"] == ["docs"] and "docs" in extras


def test_contributors_find_how_to_help_and_how_to_report_a_vulnerability() -> None:
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    for promised in ("make demo", "make test", "fails on the code", "make bench", "docs/"):
        assert promised in contributing, promised
    security = (ROOT / "SECURITY.md").read_text()
    for promised in ("Supported versions", "privately", "over a limit", "lock-out", "wrong person"):
        assert promised.lower() in security.lower(), promised


def _repeated(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return subprocess.run(
        [sys.executable, ROOT / ".ci" / "repeated_code.py", tmp_path], capture_output=True, text=True, check=False
    )


SENDS = """
def {name}(self, {value}):
    signals.{signal}.send(
        sender=self.__class__,
        name=self.{name},
        partition=self.partition,
        token={value}.token,
        fence={value}.fence,
        weight={value}.weight,
        used={count} + 1,
    )
    return {value}
"""


def test_the_repeated_code_check_finds_a_block_copied_with_other_names(tmp_path: Path) -> None:
    found = _repeated(
        tmp_path,
        {
            "a.py": SENDS.format(name="held", value="permit", signal="acquired", count="used"),
            "b.py": "x = 1\n" + SENDS.format(name="lost", value="grant", signal="lost", count="holders"),
        },
    )
    assert found.returncode == 1 and "a.py:2-12 ~ b.py:3-13" in found.stdout, found.stdout


LOOP = """
local {items} = redis.call('ZRANGEBYSCORE', KEYS[{k}], '-inf', now, 'LIMIT', 0, {batch})
for i = 1, #{items} do
  local {weight} = tonumber(redis.call('HGET', KEYS[{w}], {items}[i])) or 1
  {used} = {used} - {weight}
  redis.call('HDEL', KEYS[{w}], {items}[i])
  redis.call('ZREM', KEYS[{k}], {items}[i])
end
redis.call('SET', KEYS[{u}], {used})
return {used}
"""


def test_the_repeated_code_check_reads_lua_and_passes_what_is_not_repeated(tmp_path: Path) -> None:
    first = LOOP.format(items="gone", k=1, batch=100, weight="w", used="used", w=2, u=3)
    found = _repeated(
        tmp_path, {"a.lua": first, "b.lua": LOOP.format(items="x", k=4, batch=8, weight="n", used="c", w=5, u=6)}
    )
    assert found.returncode == 1 and "a.lua:2-10 ~ b.lua:2-10" in found.stdout, found.stdout
    fields = "\n".join(f"    {name}: int" for name in "abcdefgh")
    unrepeated = {
        "a.lua": first,
        "c.py": f"class A:\n{fields}\n",
        "d.py": f"class B:\n{fields.replace(': int', ': str')}\n",
    }
    (tmp_path / "b.lua").unlink()
    found = _repeated(tmp_path, unrepeated)
    assert found.returncode == 0, found.stdout


STEP = """
@dataclass(frozen=True)
class {name}:
    \"\"\"A step that asks web/visits.py; reply: what it answers.\"\"\"

    semaphore: Semaphore

    def run(self, request: HttpRequest) -> {reply}:
        return visits.{call}(request, self.semaphore)

    async def arun(self, request: HttpRequest) -> {reply}:
        return await visits.a{call}(request, self.semaphore)
"""


def test_the_repeated_code_check_counts_the_head_of_a_class_with_methods_and_not_of_a_record(tmp_path: Path) -> None:
    """Two small classes written twice are a copy (their heads count); records of one shape are not."""
    steps = STEP.format(name="_PassingBy", reply="bool", call="bypassed") + STEP.format(
        name="_Visiting", reply="Visit", call="visit"
    )
    found = _repeated(tmp_path, {"a.py": steps})
    assert found.returncode == 1 and "a.py:2-12 ~ a.py:14-24" in found.stdout, found.stdout
    records = "".join(f"@dataclass(frozen=True)\nclass R{n}:\n    a: int\n    b: str\n\n\n" for n in range(8))
    (tmp_path / "a.py").write_text(records)
    found = _repeated(tmp_path, {"b.py": records.replace("R", "S")})
    assert found.returncode == 0, found.stdout


def test_the_repeated_code_check_takes_named_constants_for_declarations(tmp_path: Path) -> None:
    """Two lists of constants (attribute keys, outcome names) share a shape and nothing to fold."""
    keys = "".join(f'{name.upper()} = "django_semaphore.{name}"\n' for name in ("name", "state", "mode", "result"))
    outcomes = "".join(f'{name.upper()} = "{name}"  # one outcome\n' for name in ("acquired", "full", "bypassed"))
    sizes = "".join(f"{name} = {size}\n" for name, size in (("MIN", 1), ("MAX", 100), ("LIMIT", -1), ("OFF", None)))
    found = _repeated(tmp_path, {"a.py": keys + sizes, "b.py": outcomes + sizes.replace("MAX", "TOP")})
    assert found.returncode == 0, found.stdout


def test_the_package_repeats_no_block_but_those_still_listed() -> None:
    checked = subprocess.run(
        [sys.executable, ".ci/repeated_code.py", "--allowed", ".ci/repeated_code_allowed", "django_semaphore"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout
    allowed = (ROOT / ".ci" / "repeated_code_allowed").read_text().splitlines()
    listed = [line for line in allowed if line and not line.startswith("#")]
    found = [line for line in checked.stdout.splitlines() if line.startswith("allowed: ")]
    assert len(found) == len(listed), "a pair listed as allowed no longer repeats: take it off the list"
