"""The `ctxrag` CLI end to end (in-process with typer's runner, plus one real subprocess): ingest with bad files,
search --json, kb/doc management, errors, --debug logging, and a chat endpoint that is down."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxrag.cli.main import app
from ctxrag.testing.llm_server import HANG_GUARD_S

LONG = ("The Falcon-7 pump moves 40 litres per minute and was designed in Oslo by a small team of engineers who "
        "wanted a quiet pump for greenhouses; this sentence is deliberately longer than one hundred characters.")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "falcon.md").write_text(f"# Falcon\n\n{LONG}\n", encoding="utf-8")
    (d / "xinghe.md").write_text("# 星河\n\n星河知识库的默认端口是 9321。\n", encoding="utf-8")
    return d


def run(*args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(app, list(args), env=env)
    return result


def test_ingest_reports_each_file_and_exits_nonzero_on_bad_input(corpus: Path, tmp_path: Path) -> None:
    (corpus / "empty.txt").write_text("", encoding="utf-8")
    missing = run("ingest", str(corpus), str(tmp_path / "nope.md"), "--kb", "proj")
    assert missing.exit_code == 1  # a given path that does not exist: refused before anything is written
    assert "nope.md: no such file or directory" in missing.output and "added" not in missing.output
    r = run("ingest", str(corpus), "--kb", "proj")
    assert r.exit_code == 1  # a bad file inside a folder is reported, the others ingested
    out = r.output
    assert "added" in out and "falcon.md" in out and "xinghe.md" in out and "empty.txt" in out
    assert "2 added, 0 updated, 0 skipped, 1 failed" in out
    r2 = run("ingest", str(corpus / "falcon.md"), "--kb", "proj")
    assert r2.exit_code == 0 and "skipped" in r2.output and "unchanged" in r2.output


def test_search_json_has_full_text_and_fields(corpus: Path) -> None:
    assert run("ingest", str(corpus), "--kb", "proj").exit_code == 0
    r = run("search", "Falcon pump litres", "--kb", "proj", "-k", "2", "--json")
    assert r.exit_code == 0, r.output
    hits = json.loads(r.output)
    assert hits[0]["rank"] == 1 and hits[0]["source"].endswith("falcon.md")
    assert LONG in hits[0]["text"]  # the FULL chunk text
    assert {"score", "chunk_id", "kb", "heading_path"} <= set(hits[0])
    plain = run("search", "Falcon pump litres", "--kb", "proj", "-k", "1", "--mode", "bm25")
    assert LONG in plain.output and "score=" in plain.output


def test_kb_and_doc_management(corpus: Path) -> None:
    run("ingest", str(corpus), "--kb", "proj")
    assert "proj" in run("kb", "list").output
    show = json.loads(run("kb", "show", "proj").output)
    assert show["documents"] == 2
    docs = json.loads(run("doc", "list", "--kb", "proj", "--json").output)
    assert sorted(Path(d["source"]).name for d in docs) == ["falcon.md", "xinghe.md"]
    r = run("doc", "delete", "falcon.md", "--kb", "proj")
    assert r.exit_code == 0 and "deleted" in r.output
    hits = json.loads(run("search", "Falcon pump", "--kb", "proj", "--json").output)
    assert all(not h["source"].endswith("falcon.md") for h in hits)
    assert run("doc", "delete", "falcon.md", "--kb", "proj").exit_code == 1
    assert run("kb", "delete", "proj", "--yes").exit_code == 0
    assert "proj" not in run("kb", "list").output


def test_unknown_kb_is_a_clear_error() -> None:
    r = run("search", "anything", "--kb", "missing-kb")
    assert r.exit_code == 1
    assert "unknown knowledge base 'missing-kb'" in r.output
    assert "Traceback" not in r.output


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_ask_with_chat_endpoint_down_names_url_not_key(corpus: Path) -> None:
    run("ingest", str(corpus), "--kb", "proj")
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    env = {"CTXRAG_LLM__PROVIDER": "openai", "CTXRAG_LLM__BASE_URL": url, "CTXRAG_LLM__API_KEY": "sk-very-secret-42",
           "CTXRAG_LLM__MAX_RETRIES": "0", "CTXRAG_LLM__TIMEOUT": "5"}
    r = run("ask", "What does the Falcon pump move?", "--kb", "proj", env=env)
    assert r.exit_code == 1
    assert url in r.output and "unreachable" in r.output
    assert "sk-very-secret-42" not in r.output and "Traceback" not in r.output


def test_debug_logs_full_texts(corpus: Path) -> None:
    run("ingest", str(corpus), "--kb", "proj")
    r = CliRunner().invoke(app, ["--debug", "search", "Falcon pump", "--kb", "proj", "-k", "1", "--mode", "dense"])
    assert r.exit_code == 0
    # the stage log carries the whole chunk (> 100 characters), not an abbreviation
    assert r.output.count(LONG) >= 2, r.output


@pytest.mark.slow  # the installed entry point as a process; the commands themselves run in-process above
def test_real_entry_point_subprocess(corpus: Path, ctxrag_home: Path) -> None:
    env = dict(os.environ, CTXRAG_HOME=str(ctxrag_home))
    exe = Path(sys.executable).with_name("ctxrag")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ctxrag.cli.main"]
    p = subprocess.run(cmd + ["ingest", str(corpus), "--kb", "sub"], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 0, p.stderr
    p = subprocess.run(cmd + ["search", "默认端口", "--kb", "sub", "-k", "1", "--json"], env=env, capture_output=True,
                       text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 0 and json.loads(p.stdout)[0]["source"].endswith("xinghe.md")


# ----------------------------------------------------------------------------------------- the command table


def _command_modules(folder: Path, monkeypatch: pytest.MonkeyPatch, **sources: str) -> None:
    """Write each source as module ``name`` in `folder`, importable for this test only."""
    for name, source in sources.items():
        (folder / f"{name}.py").write_text(source, encoding="utf-8")
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(folder))


COMMAND = "import typer\n{imports}\n\ndef hello() -> None:\n    typer.echo('hello')\n"


def test_every_command_of_the_table_is_mounted() -> None:
    from ctxrag.cli.main import COMMANDS

    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert names == {row.name for row in COMMANDS}
    assert all(not row.requires for row in COMMANDS)  # none imports an optional package when ctxrag starts


def test_a_missing_optional_package_hides_only_its_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import typer

    from ctxrag.cli.main import CommandRow, mount

    _command_modules(tmp_path, monkeypatch, plain_cmd=COMMAND.format(imports=""),
                     extra_cmd=COMMAND.format(imports="import ctxrag_test_absent_extra  # noqa: F401"))
    target = typer.Typer()
    skipped = mount(target, [CommandRow("plain", "plain_cmd", "hello"),
                             CommandRow("extra", "extra_cmd", "hello", requires=("ctxrag_test_absent_extra",))])
    assert skipped == ["extra"]
    assert [c.name for c in target.registered_commands] == ["plain"]
    assert CliRunner().invoke(target, []).stdout == "hello\n"  # typer runs a lone command without its name


def test_a_missing_package_the_row_does_not_list_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import typer

    from ctxrag.cli.main import CommandRow, mount

    _command_modules(tmp_path, monkeypatch, extra_cmd=COMMAND.format(imports="import ctxrag_test_absent_extra"),
                     typo_cmd=COMMAND.format(imports="from typer import no_such_name"))
    with pytest.raises(ModuleNotFoundError, match="ctxrag_test_absent_extra"):
        mount(typer.Typer(), [CommandRow("extra", "extra_cmd", "hello", requires=("another_package",))])
    with pytest.raises(ImportError, match="no_such_name"):  # installed, but not what the module needs: not absent
        mount(typer.Typer(), [CommandRow("typo", "typo_cmd", "hello", requires=("typer",))])
    with pytest.raises(ValueError, match="only third-party packages may be optional"):
        mount(typer.Typer(), [CommandRow("eval", "ctxrag.cli.eval", "eval_app", requires=("ctxrag",))])


def test_a_broken_ctxrag_command_module_fails_loudly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import typer

    from ctxrag.cli.main import CommandRow, mount

    _command_modules(tmp_path, monkeypatch,
                     broken_cmd=COMMAND.format(imports="from ctxrag.cli.common import no_such_helper"))
    with pytest.raises(ImportError, match="no_such_helper") as raised:
        mount(typer.Typer(), [CommandRow("broken", "broken_cmd", "hello")])
    assert raised.value.name == "ctxrag.cli.common"


def test_ctxrag_fails_when_a_command_module_cannot_be_imported() -> None:
    """A real process: with `ctxrag.cli.eval` unimportable, `ctxrag` stops with that module named instead of starting
    without its `eval` command."""
    probe = ("import sys\nsys.modules['ctxrag.cli.eval'] = None  # import of it now raises ModuleNotFoundError\n"
             "from ctxrag.cli.main import app\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    p = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert p.returncode != 0 and "ModuleNotFoundError" in p.stderr and "ctxrag.cli.eval" in p.stderr, p.stderr
