"""What a project's virtual environment gets from ``pip install ctxrag`` and each extra: packages and disk.

Builds the wheel, has pip resolve each install into a brand-new venv as for a new project (``--dry-run
--ignore-installed --report``: the package index decides every version; bootstrap's llama.cpp wheel is offered as the
install page says), and sums the installed size of each resolved distribution from its RECORD in this environment
(the same version installed here; one that is not is counted and named). Writes the ``install_size`` page.

    python bench/bench_install_size.py --page
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pagedata  # noqa: E402

ROOT = pagedata.ROOT
SETS = ["", "local", "local,server", "eval"]


def _installed_size(name: str, version: str) -> int | None:
    """Bytes the distribution's RECORD lists, when this environment has that version."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != version:
        return None
    return sum(f.size or 0 for f in dist.files or [])


def _llama_folder() -> Path:
    from ctxrag.models.llama_build import cpu_flags, safe_cmake_args

    flags = safe_cmake_args(cpu_flags())
    return Path.home() / ".cache" / "ctxrag" / "wheels" / hashlib.sha256(flags.encode()).hexdigest()[:12]


def resolve(wheel: Path, venv_python: Path, extras: str, work: Path) -> list[tuple[str, str]]:
    report = work / f"report-{extras or 'base'}.json"
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv_python), "install", "--dry-run", "--quiet",
                    "--ignore-installed", "--disable-pip-version-check", "--report", str(report), "--prefer-binary",
                    "--find-links", str(_llama_folder()), target], check=True, capture_output=True, text=True)
    return [(i["metadata"]["name"], i["metadata"]["version"])
            for i in json.loads(report.read_text(encoding="utf-8"))["install"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", action="store_true", help="write docs/benchmarks/data/install_size.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(work / "dist"),
                        str(ROOT)], check=True, capture_output=True, text=True)
        wheel = next((work / "dist").glob("ctxrag-*.whl"))
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True)
        python = work / "venv" / "bin" / "python"
        rows, notes = [], []
        for extras in SETS:
            resolved = resolve(wheel, python, extras, work)
            sizes = {name: _installed_size(name, version) for name, version in resolved if name != "ctxrag"}
            known = {n: s for n, s in sizes.items() if s is not None}
            top = sorted(known.items(), key=lambda kv: -kv[1])[:4]
            rows.append([f"ctxrag[{extras}]" if extras else "ctxrag", len(resolved),
                         round(sum(known.values()) / 2**20), len(sizes) - len(known),
                         ", ".join(f"{n} {s / 2**20:.0f}" for n, s in top)])
            missing = sorted(n for n in sizes if n not in known)
            if missing:
                notes.append(f"ctxrag[{extras}]: not installed here at the resolved version, so not in the size: "
                             + ", ".join(missing))
            print(rows[-1], flush=True)
    table = pagedata.Table(
        caption="A new venv: packages pip installs and their size on disk",
        columns=["install", "packages (ctxrag included)", "installed MiB", "packages not sized", "largest (MiB)"],
        rows=rows)
    notes = ["Sizes are the RECORD sizes of the versions installed in the measuring environment; the venv's own "
             "pip and Python links add a few MiB. The [local] extra's model data wheels hold the 1.5B GGUF in parts; "
             "its first use assembles it once into the shared models cache (a second copy of about that size, "
             "outside the venv).", *notes]
    print(json.dumps(rows, indent=1))
    if args.page:
        pagedata.write_page_data(
            "install_size", title="Install size", measures="packages and disk a new project's venv gets from "
            "pip install ctxrag and each extra (resolved by pip from the package index, as for a new project)",
            data="the ctxrag wheel built from this commit; pip's resolution from the package index",
            command="python bench/bench_install_size.py --page", tables=[table], notes=notes)


if __name__ == "__main__":
    main()
