"""Text the CLI prints that came from outside (file names, reasons): one line each, whatever the name holds.

Example::

    from ctxrag.cli.display import printable
    printable("report\nfinal.txt")   # 'report\\nfinal.txt': a newline in a file name cannot forge an output line
"""
from __future__ import annotations

import re

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\\]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def printable(text: object) -> str:
    """`text` with control characters (and backslashes, so the escaping is unambiguous) written as escapes.

    >>> printable("a\\nb.md"), printable("星河.md")
    ('a\\\\nb.md', '星河.md')
    """
    s = str(text)
    if not _UNPRINTABLE.search(s):
        return s
    return _UNPRINTABLE.sub(lambda m: _NAMED.get(m.group(), f"\\x{ord(m.group()):02x}"
                                                 if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"), s)
