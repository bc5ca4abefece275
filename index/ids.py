"""The document id rule, the one place it is defined: source files (:func:`citerag.index.ingest.given_doc_id`), the API's
``POST /documents`` schema and every backend's writes (:func:`citerag.index.writes.check_documents`) apply it.

A document id is a string that

* holds some non-space text;
* is at most :data:`MAX_ID_CHARS` (200) characters and :data:`MAX_ID_BYTES` (1,024) bytes in UTF-8 -- the Milvus
  backend's primary-key width; 200 characters take at most 800 bytes, so the character limit is the one met first,
  and the byte limit only guards the Milvus schema;
* is valid Unicode (no lone surrogate) and holds no control character or line break (category ``Cc``, ``Zl`` or
  ``Zp``: tab, newline, U+0085, U+2028, ...), which would break log lines, URLs and the write-ahead log's lines.

A backend may refuse more where its engine cannot store an id (the Milvus backend: ``"`` and ``\\``, see
:func:`citerag.index.milvus.MilvusBackend.write`).
"""

from __future__ import annotations

import unicodedata

#: Longest document id accepted, in characters.
MAX_ID_CHARS = 200
#: Longest document id accepted, in UTF-8 bytes (the Milvus primary key's VARCHAR width).
MAX_ID_BYTES = 1_024


def check_doc_id(doc_id: object) -> str:
    """``doc_id`` when it follows the id rule (module docstring).

    Returns:
        ``doc_id`` unchanged (a ``str``).

    Raises:
        ValueError: the rule it breaks, as a phrase that follows the field's name (``"must be at most 200
            characters, got 201"``): not a string, blank, too long, not valid Unicode, or a control character.
    """
    if not isinstance(doc_id, str):
        raise ValueError(f"must be a string, got {type(doc_id).__name__}")
    if not doc_id.strip():
        raise ValueError("must hold non-space text")
    if len(doc_id) > MAX_ID_CHARS:
        raise ValueError(f"must be at most {MAX_ID_CHARS} characters, got {len(doc_id)}")
    try:
        size = len(doc_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (it holds a lone surrogate)") from None
    if size > MAX_ID_BYTES:  # met only if MAX_ID_CHARS grows past MAX_ID_BYTES / 4
        raise ValueError(f"must be at most {MAX_ID_BYTES} bytes in UTF-8, got {size}")
    if any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in doc_id):
        raise ValueError("must not contain control characters or line breaks (tab, newline, U+0085, U+2028, ...)")
    return doc_id
