"""Tests for ctxrag.loading.loaders (and the encoding/converter helpers it uses), on real files in tmp_path."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ctxrag.errors import LoadError
from ctxrag.loading import LoadedDocument, decode_bytes, expand_paths, file_kind, iter_files, load_file
from ctxrag.loading.converters import parse_jsonl_records

REPO = Path(__file__).resolve().parents[2]
SAMPLE_CORPUS = REPO / "examples" / "sample_corpus"


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF (Helvetica text, one text object per page) with a correct xref table."""
    n = len(pages)
    font_id = 3 + 2 * n
    kids = " ".join(f"{3 + 2 * k} 0 R" for k in range(n))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode()]
    for k, text in enumerate(pages):
        stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * k} 0 R "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def write(tmp_path: Path, name: str, content: str | bytes, encoding: str = "utf-8") -> Path:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode(encoding))
    return path


def assert_load_error(path: Path, *fragments: str) -> LoadError:
    with pytest.raises(LoadError) as info:
        load_file(path)
    message = str(info.value)
    assert str(path) in message or path.name in message
    for fragment in fragments:
        assert fragment in message, message
    return info.value


# ---- plain text, Markdown, encodings ------------------------------------------------------------------------
def test_txt_utf8(tmp_path: Path) -> None:
    path = write(tmp_path, "notes.txt", "第一行。\r\nsecond line\r\n")
    doc = load_file(path)
    assert isinstance(doc, LoadedDocument)
    assert doc.text == "第一行。\nsecond line\n"  # CRLF normalised so offsets agree across platforms
    assert doc.source == str(path.resolve())
    assert doc.title == "notes"
    assert doc.metadata == {"file_type": "text", "encoding": "utf-8"}
    assert doc.records is None


def test_markdown_title_from_first_h1(tmp_path: Path) -> None:
    path = write(tmp_path, "guide.markdown", "intro line\n\n## Not the title\n\n# 星河 安装指南 #\n\nbody\n")
    doc = load_file(path)
    assert doc.title == "星河 安装指南"
    assert doc.metadata["file_type"] == "markdown"


def test_markdown_without_heading_uses_stem(tmp_path: Path) -> None:
    assert load_file(write(tmp_path, "readme.md", "just text")).title == "readme"


def test_utf8_bom(tmp_path: Path) -> None:
    doc = load_file(write(tmp_path, "bom.md", b"\xef\xbb\xbf# Title\n\ntext"))
    assert doc.text.startswith("# Title")
    assert doc.title == "Title"
    assert doc.metadata["encoding"] == "utf-8-sig"


def test_gbk_chinese(tmp_path: Path) -> None:
    text = "星河知识库支持多种文件格式，包括PDF和Word。部署时请使用7420端口。\n"
    doc = load_file(write(tmp_path, "gbk.txt", text, "gbk"))
    assert doc.text == text
    assert doc.metadata["encoding"] == "gb18030"


def test_short_gbk_is_not_mistaken_for_big5(tmp_path: Path) -> None:
    assert load_file(write(tmp_path, "hi.txt", "你好", "gbk")).text == "你好"


def test_big5_traditional_chinese(tmp_path: Path) -> None:
    text = "中華民國的知識庫支援多種檔案格式。"
    doc = load_file(write(tmp_path, "big5.txt", text, "big5"))
    assert doc.text == text
    assert doc.metadata["encoding"] == "big5"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_bom(tmp_path: Path, encoding: str) -> None:
    text = "UTF-16 文本：知识库 test"
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    doc = load_file(write(tmp_path, "wide.txt", data))
    assert doc.text == text


def test_cp1252_western_text(tmp_path: Path) -> None:
    assert load_file(write(tmp_path, "cafe.txt", "Café crème brûlée, naïve façade.", "cp1252")).text.startswith("Café")


@pytest.mark.parametrize("data", [
    b"The pump moves water \xff\xfe\xfa quietly.",  # decoded as cp1252 this was stored as "\u00ff\u00fe\u00fa"
    "星河知识库".encode("utf-8")[:-1] + b" end",  # UTF-8 cut inside a character
    b"caf\xc3 au lait \x80\x81\x82",
    bytes(range(0x80, 0x100)) * 4,
])
def test_invalid_utf8_is_a_load_error_with_offset(tmp_path: Path, data: bytes) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start
    error = assert_load_error(write(tmp_path, "bad.txt", data), "not UTF-8", f"offset {offset}", "convert the file")
    assert error.path.endswith("bad.txt")


@pytest.mark.parametrize(("text", "encoding"), [("Café crème brûlée, naïve façade. Œuvre “quoted” – 5 €.", "cp1252"),
                                                ("日本語のテキストです。知識ベースを検索します。", "shift_jis")])
def test_real_legacy_encodings_still_load(tmp_path: Path, text: str, encoding: str) -> None:
    assert load_file(write(tmp_path, "legacy.txt", text, encoding)).text == text


def test_invalid_bytes(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.txt", b"abc \xff\xfe\xfa\xfb\x80\x81 def")
    assert_load_error(path, "invalid bytes", "0xff")


def test_decode_bytes_rejects_broken_utf16_after_bom() -> None:
    with pytest.raises(LoadError, match="byte-order mark"):
        decode_bytes(b"\xff\xfea\x00\x00\xd8")  # lone high surrogate


def test_empty_and_whitespace_files(tmp_path: Path) -> None:
    assert_load_error(write(tmp_path, "empty.md", b""), "empty")
    assert_load_error(write(tmp_path, "blank.txt", " \n\t\r\n  "), "only whitespace")


def test_binary_file_with_text_extension(tmp_path: Path) -> None:
    assert_load_error(write(tmp_path, "image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), "binary")


def test_control_characters_count_as_binary(tmp_path: Path) -> None:
    assert_load_error(write(tmp_path, "ctl.txt", bytes(range(1, 9)) * 20 + b"text"), "binary")


def test_unsupported_extension(tmp_path: Path) -> None:
    assert_load_error(write(tmp_path, "photo.png", b"not really"), "unsupported file type", "'.png'")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert_load_error(tmp_path / "nope.md", "no such file")
    assert_load_error(tmp_path, "is a directory")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path, "secret.txt", "hidden")
    path.chmod(0)
    try:
        assert_load_error(path, "permission denied")
    finally:
        path.chmod(0o600)


def test_permission_error_is_load_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # root can read a chmod-0 file, so also prove the branch by making the read itself fail
    path = write(tmp_path, "secret.txt", "hidden")

    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", deny)
    assert_load_error(path, "permission denied")


# ---- HTML ---------------------------------------------------------------------------------------------------
HTML = """<!DOCTYPE html><html><head><title>Support Page</title><style>p { color: red }</style>
<script>var secret = "do not index";</script></head>
<body><nav><a href="/">Home</a> menu</nav>
<h1>Support</h1><p>Open a <b>ticket</b>.</p>
<h2>Hours</h2><ul><li>Monday</li><li>Friday</li></ul>
<table><tr><th>Plan</th><th>Time</th></tr><tr><td>Team</td><td>4 hours</td></tr></table>
<pre>def f():
    return 1</pre></body></html>"""


def test_html_headings_and_dropped_tags(tmp_path: Path) -> None:
    doc = load_file(write(tmp_path, "page.htm", HTML))
    assert doc.title == "Support Page"
    assert doc.metadata["file_type"] == "html"
    assert "# Support\n\nOpen a ticket ." in doc.text or "# Support\n\nOpen a ticket." in doc.text
    assert "\n## Hours\n" in doc.text
    assert "- Monday\n- Friday" in doc.text
    assert "| Plan | Time |\n| Plan: Team | Time: 4 hours |" in doc.text  # each cell names its column
    assert "def f():\n    return 1" in doc.text  # <pre> keeps its indentation
    for dropped in ("do not index", "color: red", "Home", "menu"):
        assert dropped not in doc.text


def test_html_title_falls_back_to_h1(tmp_path: Path) -> None:
    doc = load_file(write(tmp_path, "x.html", "<html><body><h1>首页 标题</h1><p>内容</p></body></html>"))
    assert doc.title == "首页 标题"


def test_html_without_visible_text(tmp_path: Path) -> None:
    assert_load_error(write(tmp_path, "x.html", "<html><script>x=1</script></html>"), "no visible text")


# ---- PDF ----------------------------------------------------------------------------------------------------
def test_pdf_pages_and_offsets(tmp_path: Path) -> None:
    doc = load_file(write(tmp_path, "manual.pdf", make_pdf(["Hello PDF world", "Second page text"])))
    assert doc.metadata["file_type"] == "pdf"
    assert doc.metadata["page_count"] == 2
    starts = doc.metadata["page_starts"]
    assert doc.text[starts[0]:].startswith("Hello PDF world")
    assert doc.text[starts[1]:].startswith("Second page text")
    assert doc.title == "manual"


def test_corrupt_pdf(tmp_path: Path) -> None:
    truncated = make_pdf(["Hello PDF world"])[:60]
    assert_load_error(write(tmp_path, "cut.pdf", truncated), "PDF")
    assert_load_error(write(tmp_path, "garbage.pdf", b"this is not a pdf at all \x01\x02" * 10), "PDF")


def test_pdf_without_text(tmp_path: Path) -> None:
    assert_load_error(write(tmp_path, "blank.pdf", make_pdf([""])), "no extractable text")


# ---- DOCX ---------------------------------------------------------------------------------------------------
def test_docx_headings_lists_tables(tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("星河手册", level=1)
    document.add_paragraph("第一段内容。")
    document.add_heading("安装", level=2)
    document.add_paragraph("运行安装程序", style="List Bullet")
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "端口"
    table.rows[0].cells[1].text = "7420"
    path = tmp_path / "manual.docx"
    document.save(str(path))
    doc = load_file(path)
    assert doc.text == "# 星河手册\n\n第一段内容。\n\n## 安装\n\n- 运行安装程序\n\n端口 | 7420"
    assert doc.title == "星河手册"
    assert doc.metadata == {"file_type": "docx", "encoding": "binary"}


def test_corrupt_docx(tmp_path: Path) -> None:
    assert_load_error(write(tmp_path, "broken.docx", b"PK\x03\x04 not a zip"), "corrupt or unreadable DOCX")


# ---- JSON / JSONL -------------------------------------------------------------------------------------------
def test_jsonl_records_and_spans(tmp_path: Path) -> None:
    lines = [
        {"id": 1, "title": "端口", "text": "默认端口是7420。"},
        {"id": 2, "content": "Second record."},
        {"id": 3, "name": "Ann", "age": 30, "tags": ["a", "b"], "extra": {"k": "v"}},
    ]
    body = "\n".join(json.dumps(r, ensure_ascii=False) for r in lines[:2]) + "\n\n" + json.dumps(lines[2]) + "\n"
    doc = load_file(write(tmp_path, "faq.jsonl", body))
    assert doc.metadata["file_type"] == "jsonl"
    assert doc.metadata["record_count"] == 3
    assert doc.records is not None
    blocks = [doc.text[r["start_index"]:r["end_index"]] for r in doc.records]
    assert blocks == ["端口\n默认端口是7420。", "Second record.", 'id: 3\nname: Ann\nage: 30\ntags: a, b\nextra: {"k": "v"}']
    assert [r["line"] for r in doc.records] == [1, 2, 4]
    assert doc.records[0]["data"] == lines[0]


def test_malformed_jsonl_line_is_skipped_and_named(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.jsonl", '{"text": "ok"}\n\n{"text": broken}\n{"text": "also ok"}\n')
    doc = load_file(path)
    assert doc.text == "ok\n\nalso ok" and [r["line"] for r in doc.records] == [1, 4]
    assert doc.warnings == ["skipped 1 malformed line(s): 3 (first: invalid JSON on line 3 (column 10): "
                            "Expecting value)"]
    with pytest.raises(LoadError, match="line 3"):  # the strict parser still names the line
        parse_jsonl_records(path.read_text(encoding="utf-8"), path)


def test_jsonl_with_only_malformed_lines_fails(tmp_path: Path) -> None:
    error = assert_load_error(write(tmp_path, "bad.jsonl", '{"text": broken}\n[1,\n'), "no valid JSON line",
                              "2 malformed", "line 1")
    assert error.path.endswith("bad.jsonl")


def test_json_list_and_wrapped_records(tmp_path: Path) -> None:
    doc = load_file(write(tmp_path, "a.json", json.dumps([{"body": "one"}, {"page_content": "two"}, "three"])))
    assert doc.text == "one\n\ntwo\n\nthree"
    wrapped = load_file(write(tmp_path, "b.json", json.dumps({"version": 1, "records": [{"text": "x"}, {"text": "y"}]})))
    assert wrapped.text == "x\n\ny"
    single = load_file(write(tmp_path, "c.json", json.dumps({"city": "杭州", "port": 7420}, ensure_ascii=False)))
    assert single.text == "city: 杭州\nport: 7420"


def test_malformed_json_and_empty_records(tmp_path: Path) -> None:
    assert_load_error(write(tmp_path, "bad.json", '{"a": 1,\n "b": }'), "invalid JSON at line 2")
    assert_load_error(write(tmp_path, "none.json", "[]"), "no records")


# ---- code ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "language"), [("app.py", "python"), ("main.go", "go"), ("lib.rs", "rust"),
                                                ("index.ts", "typescript"), ("query.sql", "sql"), ("Makefile", "make")])
def test_source_code_language(tmp_path: Path, name: str, language: str) -> None:
    doc = load_file(write(tmp_path, name, "# comment\nx = 1\n"))
    assert doc.metadata == {"file_type": "code", "encoding": "utf-8", "language": language}
    assert doc.text == "# comment\nx = 1\n"
    assert doc.title == Path(name).stem  # a '# ' comment is not a title in code


def test_file_kind() -> None:
    assert file_kind(Path("a.MD")) == "markdown"
    assert file_kind(Path("a.ndjson")) == "jsonl"
    assert file_kind(Path("a.exe")) is None


def test_to_document(tmp_path: Path) -> None:
    document = load_file(write(tmp_path, "n.md", "# T\n\nx")).to_document()
    assert document.page_content == "# T\n\nx"
    assert document.metadata["title"] == "T" and document.metadata["file_type"] == "markdown"


# ---- folders ------------------------------------------------------------------------------------------------
def test_iter_files_skips_hidden_and_vendored(tmp_path: Path) -> None:
    for rel in ["a.md", "b.png", "sub/c.txt", "sub/deep/d.py", ".hidden.md", ".git/config.txt",
                "node_modules/x.js", "__pycache__/m.py", "sub/.cache/e.md"]:
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("text")
    found = [p.relative_to(tmp_path).as_posix() for p in iter_files([tmp_path])]
    assert found == ["a.md", "sub/c.txt", "sub/deep/d.py"]
    assert [p.name for p in iter_files([tmp_path], recursive=False)] == ["a.md"]
    # an explicit file is passed through even if unsupported, so load_file can say why; duplicates once
    assert [p.name for p in iter_files([tmp_path / "b.png", tmp_path / "a.md", tmp_path])] == ["b.png", "a.md", "c.txt", "d.py"]


def test_iter_files_missing_raises_and_expand_paths_collects(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("x")
    with pytest.raises(LoadError, match="no such file or directory"):
        list(iter_files([tmp_path / "missing"]))
    files, errors = expand_paths([tmp_path / "missing", tmp_path, tmp_path / "a.md", tmp_path / "gone.txt"])
    assert files == [tmp_path / "a.md"]
    assert [Path(e.path).name for e in errors] == ["missing", "gone.txt"]


def test_sample_corpus_loads() -> None:
    files, errors = expand_paths([SAMPLE_CORPUS])
    assert not errors
    kinds = {load_file(f).metadata["file_type"] for f in files}
    assert kinds == {"markdown", "text", "html", "jsonl", "code"}
    assert sum(f.stat().st_size for f in files) < 30_000
    questions = json.loads((REPO / "examples" / "sample_questions.json").read_text(encoding="utf-8"))
    for q in questions:
        assert (SAMPLE_CORPUS / q["source"]).is_file()


# ---- symbolic links and the size limit ----------------------------------------------------------------------
def test_symlink_loops_are_yielded_then_reported(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    write(folder, "good.md", "# Good\n\ntext\n")
    (folder / "self.md").symlink_to(folder / "self.md")
    (folder / "a.txt").symlink_to(folder / "b.txt")
    (folder / "b.txt").symlink_to(folder / "a.txt")
    (folder / "dangling.md").symlink_to(folder / "missing.md")
    files, errors = expand_paths([folder])
    assert not errors and sorted(p.name for p in files) == ["a.txt", "b.txt", "dangling.md", "good.md", "self.md"]
    assert sorted(p.name for p in iter_files([folder], recursive=False)) == sorted(p.name for p in files)
    for name in ("self.md", "a.txt", "b.txt"):
        assert_load_error(folder / name, "symbolic link loop")
    assert_load_error(folder / "dangling.md", "broken symbolic link", "missing.md")
    assert load_file(folder / "good.md").text.startswith("# Good")
    # given directly (as on the command line), a broken link is named as such, not "no such file"
    with pytest.raises(LoadError, match="broken symbolic link.*missing.md"):
        list(iter_files([folder / "dangling.md"]))


def test_size_limit_names_file_and_limit(tmp_path: Path) -> None:
    path = write(tmp_path, "big.txt", "x" * 5000)
    assert_load_error_kw(path, {"max_bytes": 4999}, "5,000 bytes", "limit of 4,999 bytes", "max_file_bytes")
    assert load_file(path, max_bytes=5000).text == "x" * 5000
    pdf = write(tmp_path, "big.pdf", make_pdf(["hello"]))
    assert_load_error_kw(pdf, {"max_bytes": 100}, "over the limit of 100 bytes")


def assert_load_error_kw(path: Path, kwargs: dict, *fragments: str) -> None:
    with pytest.raises(LoadError) as info:
        load_file(path, **kwargs)
    assert str(path) in str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_html_table_without_header_row_keeps_plain_cells(tmp_path: Path) -> None:
    html = ("<html><body><p>Rates</p><table><caption>Prices</caption><thead><tr><th>Plan</th><th>Price</th></tr></thead>"
            "<tbody><tr><td>Team</td><td>99</td></tr></tbody></table>"
            "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table></body></html>")
    text = load_file(write(tmp_path, "t.html", html)).text
    assert "Prices\n| Plan | Price |\n| Plan: Team | Price: 99 |" in text  # header under <thead>, caption first
    assert "| a | b |\n| c | d |" in text  # no <th> row: nothing to name the cells with
