"""The container image recipe: lint-clean, multi-stage, and buildable from its own context.

No Docker daemon or registry is needed: hadolint lints the Dockerfile, and the builder
stage's `pip wheel` is replayed on exactly the files .dockerignore lets into the context.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
OCI_LABELS = ("title", "description", "version", "revision", "created", "licenses")


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in logical]


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """(excludes, regex) per line in Docker's syntax: `*`, `**`, `?` and `!` to re-include."""
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        line = line.lstrip("!").strip("/")
        regex = ""
        for part in re.split(r"(\*\*/?|\*|\?)", line):
            if part in ("**", "**/"):
                regex += "(?:.*/)?" if part == "**/" else ".*"
            elif part == "*":
                regex += "[^/]*"
            elif part == "?":
                regex += "[^/]"
            else:
                regex += re.escape(part)
        patterns.append((not include, re.compile(regex)))
    return patterns


def _in_context(relative: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker sends ``relative`` (a POSIX path) with the build context."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for excludes, regex in patterns:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            excluded = excludes
    return not excluded


def _context_files() -> list[str]:
    """Every file Docker would send: the tracked and untracked working tree, minus .dockerignore."""
    patterns = _dockerignore_patterns()
    files = []
    for path in REPO.rglob("*"):
        relative = path.relative_to(REPO).as_posix()
        skipped = relative.startswith((".git/", ".venv/"))
        if path.is_file() and not skipped and _in_context(relative, patterns):
            files.append(relative)
    return sorted(files)


def _build_requirements_installed() -> bool:
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    for text in requires:
        requirement = Requirement(text)
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        if not requirement.specifier.contains(installed, prereleases=True):
            return False
    return True


def test_hadolint_is_clean(hadolint: str) -> None:
    """hadolint reports nothing at any level."""
    result = subprocess.run(
        [hadolint, "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_base_image_is_an_argument_pinned_by_digest() -> None:
    """`ARG BASE_IMAGE` comes first, defaults to a fully qualified, patch-pinned slim tag
    pinned by digest, and both stages use it."""
    instructions = _instructions()
    first_from = next(i for i, (name, _) in enumerate(instructions) if name == "FROM")
    args = [value for name, value in instructions[:first_from] if name == "ARG"]
    (base,) = [a.split("=", 1)[1] for a in args if a.startswith("BASE_IMAGE=")]
    pattern = r"docker\.io/library/python:3\.\d+\.\d+-slim-[a-z]+@sha256:[0-9a-f]{64}"
    assert re.fullmatch(pattern, base), base
    froms = [value.split()[0] for name, value in instructions if name == "FROM"]
    assert ["${BASE_IMAGE}", "${BASE_IMAGE}"] == froms


def test_no_index_or_credential_reaches_an_argument() -> None:
    """No ARG or ENV names an index (they land in the history); the download step takes
    the pip.conf and CA as build secrets."""
    for name, value in _instructions():
        if name in ("ARG", "ENV"):
            assert not re.search(r"INDEX|TRUSTED_HOST|CERT|PASSWORD|TOKEN", value, re.I), value
    builder, _ = _stages()
    (download,) = [v for n, v in builder if n == "RUN" and "pip download" in v]
    assert "--mount=type=secret,id=pip.conf,target=/etc/pip.conf" in download
    assert "--mount=type=secret,id=ca.crt" in download


def test_builder_downloads_locked_wheels_then_works_offline() -> None:
    """Downloads are hash-checked wheels from the locks; everything after is --no-index."""
    builder, _ = _stages()
    runs = [value for name, value in builder if name == "RUN"]
    download, install = runs
    for lock in ("requirements.lock", "requirements-build.lock"):
        assert re.search(rf"--require-hashes --only-binary=:all: .*-r {lock}", download), lock
    for command in re.findall(r"pip (?:--python \S+ )?(?:install|wheel)[^&]*", install):
        assert "--no-index" in command, command
    assert re.search(r"pip wheel --no-index --no-deps --no-build-isolation .* \.", install)


def test_final_stage_copies_the_venv_and_removes_installers() -> None:
    """The runtime stage copies only the builder's venv and removes pip and its kin."""
    _, final = _stages()
    copies = [value for name, value in final if name in ("COPY", "ADD")]
    assert ["--from=builder /opt/podresources-exporter /opt/podresources-exporter"] == copies
    (run,) = [value for name, value in final if name == "RUN"]
    for installer in ("pip", "setuptools", "wheel", "ensurepip", "python-wheels"):
        assert installer in run
    for tool in ("apt-get", "apk", "gcc", "build-essential", "pip install", "pip wheel"):
        assert tool not in run


def test_entrypoint_labels_user_and_no_healthcheck() -> None:
    """Exec-form console-script entrypoint, OCI labels, an unprivileged user, no HEALTHCHECK."""
    _, final = _stages()
    names = [name for name, _ in final]
    assert "HEALTHCHECK" not in {name for name, _ in _instructions()}
    assert [value for name, value in final if name == "ENTRYPOINT"] == ['["podresources-exporter"]']
    labels = " ".join(value for name, value in final if name == "LABEL")
    for label in OCI_LABELS:
        assert f"org.opencontainers.image.{label}=" in labels, label
    (user,) = [value for name, value in final if name == "USER"]
    assert not user.startswith(("0", "root"))
    assert names.index("USER") > names.index("RUN")


def test_variables_are_declared_in_the_stage_that_uses_them() -> None:
    """Every ${VAR} in a stage is an ARG or ENV of that stage (global ARGs do not reach in)."""
    for stage in _stages():
        declared: set[str] = set()
        for name, value in stage[1:]:
            used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", value))
            if name in ("LABEL", "COPY", "ADD", "WORKDIR", "USER", "EXPOSE", "ENV"):
                assert used <= declared, f"{name} {value}: {used - declared} undeclared"
            if name == "ARG":
                declared.add(value.split("=", 1)[0])
            if name == "ENV":
                declared.update(re.findall(r"(\w+)=", value))


def test_version_label_default_is_the_package_version() -> None:
    """The image's default version label matches pyproject.toml."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    _, final = _stages()
    assert f"VERSION={version}" in [value for name, value in final if name == "ARG"]


def test_context_holds_only_what_the_image_is_made_of() -> None:
    """.dockerignore keeps tests, docs, manifests, caches and VCS data out of the context."""
    files = _context_files()
    assert "pyproject.toml" in files
    assert "exporter/__main__.py" in files
    top = ("pyproject.toml", "README.md", "requirements.lock", "requirements-build.lock")
    for path in files:
        assert path in top or path.startswith("exporter/"), path
        assert "__pycache__" not in path
        assert not path.endswith(".pyc")


def test_builder_stage_builds_a_wheel_from_the_context(tmp_path: Path) -> None:
    """The builder's COPY lines replayed on the context and `pip wheel` give a runnable wheel."""
    builder, _ = _stages()
    patterns = _dockerignore_patterns()
    context = tmp_path / "src"
    for name, value in builder:
        if name != "COPY":
            continue
        *sources, destination = value.split()
        assert not destination.startswith("/"), "builder COPY targets are relative to WORKDIR"
        for source in sources:
            relative = source.rstrip("/")
            assert (REPO / relative).exists(), f"COPY {source}: missing from the repository"
            assert _in_context(relative, patterns), f"COPY {source}: excluded by .dockerignore"
            if (REPO / relative).is_dir():
                shutil.copytree(
                    REPO / relative,
                    context / relative,
                    ignore=lambda d, names: [
                        n
                        for n in names
                        if not _in_context((Path(d) / n).relative_to(REPO).as_posix(), patterns)
                    ],
                )
            else:
                context.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / relative, context / relative)
    wheels = tmp_path / "wheels"
    # Build offline with this interpreter's backend when it satisfies build-system.requires;
    # otherwise let pip fetch the backend into an isolated environment, as `docker build` does.
    offline = ["--no-build-isolation"] if _build_requirements_installed() else []
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            *offline,
            "--wheel-dir",
            str(wheels),
            str(context),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = wheels.glob("podresources_exporter-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    assert "exporter/__main__.py" in names
    assert not [n for n in names if n.startswith("tests/") or fnmatch.fnmatch(n, "*.pyc")]
    assert re.search(r"^podresources-exporter = exporter\.cli:main$", scripts, re.MULTILINE)


def _pins(lock: Path) -> dict[str, str]:
    text = lock.read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", text, re.MULTILINE)
    blocks = re.split(r"^(?=[A-Za-z0-9_.-]+==)", text, flags=re.MULTILINE)[1:]
    assert len(pins) == len(blocks)
    for block in blocks:  # every pin carries at least one sha256, so pip runs in hash mode
        assert "--hash=sha256:" in block, block.splitlines()[0]
    return {name.lower().replace("_", "-"): version for name, version in pins}


def test_lock_pins_every_dependency_within_pyproject_ranges() -> None:
    """requirements.lock pins each runtime dependency inside pyproject's range, with
    hashes; requirements-build.lock does the same for the build backend."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    for requires, lock in (
        (project["project"]["dependencies"], "requirements.lock"),
        (project["build-system"]["requires"], "requirements-build.lock"),
    ):
        pins = _pins(REPO / lock)
        for text in requires:
            requirement = Requirement(text)
            name = requirement.name.lower().replace("_", "-")
            assert name in pins, f"{lock}: {name} not pinned"
            assert requirement.specifier.contains(pins[name]), f"{lock}: {name}=={pins[name]}"
