#!/usr/bin/env python3
"""Read a `clipfn backfill` output folder with pyarrow and with DuckDB, print one JSON document.

Usage: read_backfill.py DIR

{"files": [{"name", "model", "dim", "rows"}],            per file, from pyarrow's Parquet metadata
 "rows": [{"key", "embedding", "error_code", "bytes"}],  every row, from pyarrow
 "duckdb": {"rows", "distinct_keys", "embedded", "errors": {code: n}, "dims": [...]}}

tests/backfill.rs runs it: both readers must accept the files and agree on what they hold.
"""

import json
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq


def main() -> None:
    folder = Path(sys.argv[1])
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
        })
        rows += table.select(["key", "embedding", "error_code", "bytes"]).to_pylist()

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
    print(json.dumps({
        "files": files,
        "rows": rows,
        "duckdb": {"rows": total, "distinct_keys": distinct, "embedded": embedded, "errors": errors, "dims": dims},
    }))


if __name__ == "__main__":
    main()
