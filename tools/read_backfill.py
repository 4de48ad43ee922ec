#!/usr/bin/env python3
"""Read a `clipfn backfill` output folder with pyarrow and with DuckDB, print one JSON document.

Usage: read_backfill.py DIR [NAME=VALUE ...]

{"files": [{"name", "model", "dim", "rows",            per file, from pyarrow's Parquet metadata
            "face_recognizer"}],                         (null when the file holds no faces)
 "rows": [{"key", "embedding", "error_code", "bytes",    every row, from pyarrow; the hash as the
           "hash", "sharpness", "taken_at", "location",  API writes it (16 hex digits)
           "width", "height", "scores", "faces",
           "ocr", "ocr_text", "objects"}],
 "duckdb": {"rows", "distinct_keys", "embedded", "errors": {code: n}, "dims": [...],
            "near_duplicates": [[key, key, bits], ...],  docs/deploy.md's queries, run as written
            "events": [[key, ...], ...],                 there; NAME=VALUE replaces a query's
            "bursts": [[key, ...], ...],                 `SET VARIABLE NAME = ...` (the test model
            "words": [key, ...] or null,                 is not CLIP: its bursts need a threshold of
            "things": [[key, score], ...] or null}}      their own); `words`, the photos by a word,
                                                         only with OCR columns; `things`, the photos
                                                         by a label, only with an objects column

tests/it/backfill.rs, tests/it/ocr.rs and tests/it/objects.rs run it: both readers must accept the files and agree on what they hold.
"""

import json
import re
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

DOCS = Path(__file__).resolve().parent.parent / "docs" / "deploy.md"


def query(name: str, files: str, settings: dict) -> str:
    """docs/deploy.md's sql block that sets `files` and whose first comment starts with `name`
    ("Pairs", "Events", "Bursts", "Photos whose text", "Photos with an object"), reading `files`, its variables replaced by
    `settings`'."""
    blocks = [block.split("```")[0] for block in DOCS.read_text().split("```sql\n")[1:]]
    query = next(b for b in blocks if b.startswith("SET VARIABLE files") and b.split("\n")[1].startswith(f"-- {name}"))
    lines = []
    for line in query.split("\n"):
        variable = re.match(r"SET VARIABLE (\w+) = ", line)
        if variable and variable[1] == "files":
            line = f"SET VARIABLE files = '{files}';"
        elif variable and variable[1] in settings:
            line = f"SET VARIABLE {variable[1]} = {settings[variable[1]]};"
        lines.append(line)
    return "\n".join(lines)


def hex_hash(value):
    """The int64 column's 64 bits as the API's 16 hex digits."""
    return None if value is None else format(value & (2**64 - 1), "016x")


def main() -> None:
    folder = Path(sys.argv[1])
    settings = dict(arg.split("=", 1) for arg in sys.argv[2:])
    paths = sorted(folder.rglob("*.parquet"))
    files, rows = [], []
    for path in paths:
        table = pq.read_table(path)
        meta = pq.read_metadata(path).metadata or {}
        files.append({
            "name": path.name,
            "model": meta.get(b"clipfn.model", b"").decode(),
            "dim": int(meta.get(b"clipfn.dim", b"0")),
            "rows": table.num_rows,
            "face_recognizer": meta[b"clipfn.face_recognizer"].decode() if b"clipfn.face_recognizer" in meta else None,
        })
        columns = ["key", "embedding", "error_code", "bytes", "hash", "sharpness", "taken_at", "location", "width",
                   "height"]
        columns += [column for column in ("scores", "faces", "ocr", "ocr_text", "objects") if column in table.column_names]
        for row in table.select(columns).to_pylist():
            row["hash"] = hex_hash(row["hash"])
            rows.append(row)

    glob = str(folder / "**" / "*.parquet")
    con = duckdb.connect()
    total, distinct, embedded = con.execute(
        "SELECT count(*), count(DISTINCT key), count(embedding) FROM read_parquet(?)", [glob]
    ).fetchone()
    errors = dict(con.execute(
        "SELECT error_code, count(*) FROM read_parquet(?) WHERE error_code IS NOT NULL GROUP BY 1", [glob]
    ).fetchall())
    dims = [d for (d,) in con.execute(
        "SELECT DISTINCT len(embedding) FROM read_parquet(?) WHERE embedding IS NOT NULL", [glob]
    ).fetchall()]
    near_duplicates = [list(pair) for pair in con.execute(query("Pairs", glob, settings)).fetchall()]
    events = [row[2] for row in con.execute(query("Events", glob, settings)).fetchall()]
    bursts = [row[1] for row in con.execute(query("Bursts", glob, settings)).fetchall()]
    with_text = any("ocr_text" in pq.read_schema(path).names for path in paths)
    words = [key for (key,) in con.execute(query("Photos whose text", glob, settings)).fetchall()] if with_text else None
    with_objects = any("objects" in pq.read_schema(path).names for path in paths)
    things = [list(row) for row in con.execute(query("Photos with an object", glob, settings)).fetchall()] \
        if with_objects else None
    print(json.dumps({
        "files": files,
        "rows": rows,
        "duckdb": {"rows": total, "distinct_keys": distinct, "embedded": embedded, "errors": errors, "dims": dims,
                   "near_duplicates": near_duplicates, "events": events, "bursts": bursts, "words": words,
                   "things": things},
    }))


if __name__ == "__main__":
    main()
