"""Idempotent, atomic Parquet output per micro-batch, written by the driver.

A batch's rows of one table and date go to `TABLE/date=YYYY-MM-DD/batch-<id>.parquet`:
written under a dot name (readers skip those), then renamed. A batch that Spark runs
again (after a crash before its commit) first deletes what an earlier attempt wrote, so
a table never holds a batch twice.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def _name(batch_id: int) -> str:
    return f"batch-{batch_id:012d}.parquet"


def forget(out: Path, tables: list[str], batch_id: int) -> int:
    """Delete the files an earlier attempt of this batch wrote; returns how many."""
    found = [path for table in tables for path in (out / table).glob(f"date=*/{_name(batch_id)}")]
    for path in found:
        path.unlink()
    return len(found)


def write(rows: pa.Table, directory: Path, batch_id: int) -> None:
    """Write `rows` (with a `date` column) partitioned by date, one file per date."""
    if rows.num_rows == 0:
        return
    for day in sorted(pc.unique(rows["date"]).to_pylist()):
        part = rows.filter(pc.equal(rows["date"], pa.scalar(day, rows["date"].type)))
        target = directory / f"date={day.isoformat()}" / _name(batch_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.tmp")
        pq.write_table(part.drop_columns(["date"]), staging)
        staging.replace(target)
