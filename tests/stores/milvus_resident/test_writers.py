"""Writers of a Milvus-resident document: alive while younger than the grace period and, on this host, while
their pid runs; a ``writing`` documents row names one in its metadata, no other row does."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

from ctxrag.stores.documents.docstore import DocumentRecord
from ctxrag.stores.milvus_resident import collections as cols
from ctxrag.stores.milvus_resident.writers import describe_writer, writer_alive, writer_now


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def test_a_writer_is_alive_while_young_and_on_this_host_while_its_pid_runs() -> None:
    now = time.time()
    assert writer_alive(writer_now(), now, 600.0)
    assert not writer_alive({**writer_now(), "started": now - 601}, now, 600.0)
    dead = {"host": socket.gethostname(), "pid": _dead_pid(), "started": now}
    assert not writer_alive(dead, now, 600.0)
    assert writer_alive({**dead, "host": socket.gethostname() + "-other"}, now, 600.0)  # cannot be probed
    assert not writer_alive(None) and not writer_alive({})  # nothing names a writer: an older version's row
    assert describe_writer(dead, now, 600.0) == f"pid {dead['pid']} on {socket.gethostname()} gone"
    assert describe_writer(None) == "an unknown writer gone"


def test_only_a_writing_row_names_its_writer() -> None:
    doc = DocumentRecord("d1", "a.md", "a", "h", "text", 1, {"lang": "en"})
    me = writer_now()
    row = cols.document_row(doc, n_chunks=1, status=cols.STATUS_WRITING, write_id="w", added_at=0.0, updated_at=0.0,
                            writer=me)
    assert cols.row_writer(row) == me and row["metadata"] == {"lang": "en", cols.ROW_WRITER: me}
    assert doc.metadata == {"lang": "en"}  # the document's own metadata is not changed
    done = cols.document_row(doc, n_chunks=1, status=cols.STATUS_OK, write_id="w", added_at=0.0, updated_at=0.0,
                             writer=me)
    assert done["metadata"] == {"lang": "en"} and cols.row_writer(done) is None
    assert cols.row_writer({**row, "status": cols.STATUS_SWAPPING}) is None
    assert cols.row_writer({**row, "metadata": {"lang": "en"}}) is None  # written before writers were named
    assert cols.with_writer(row["metadata"], None) == {"lang": "en"}
