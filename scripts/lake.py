"""The tests' independent reader of Iceberg tables (pyiceberg over pyarrow) and encoder and
decoder of Avro (fastavro). Prints JSON on stdout.

  lake.py table METADATA_JSON                      snapshots and rows of a hadoop-catalog table
  lake.py sql-table URI CATALOG NAMESPACE.TABLE     the same through pyiceberg's SqlCatalog
  lake.py poll METADATA_DIR STOP OUT               scan each new snapshot until the file STOP exists
  lake.py prune METADATA_JSON COLUMN FROM TO       files planned for FROM <= COLUMN < TO, and rows
"""
import glob
import json
import os
import sys
import time


def cell(v):
    if v is None:
        return "NULL"
    if hasattr(v, "isoformat"):
        return v.isoformat(sep=" ") if hasattr(v, "hour") else v.isoformat()
    if isinstance(v, float):
        return repr(v)
    return str(v)


def rows_of(arrow):
    cols = arrow.column_names
    out = []
    for r in arrow.to_pylist():
        out.append(",".join(cell(r[c]) for c in cols))
    out.sort()
    return out


def merged(table, snapshot_id):
    """The table's rows at a snapshot with equality deletes applied, as the spec defines them
    (pyiceberg plans no scan over equality deletes): a delete file removes the rows of its
    keys from every data file of a lower sequence number. Files are read by pyarrow, and the
    manifests by pyiceberg."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    entries = table.inspect.entries(snapshot_id=snapshot_id).to_pylist()
    live = [e for e in entries if e["status"] != 2]
    schema = table.schema()
    deletes = []
    for e in live:
        f = e["data_file"]
        if f["content"] == 2:
            names = [schema.find_field(i).name for i in f["equality_ids"]]
            keys = {tuple(r[n] for n in names) for r in pq.read_table(f["file_path"]).to_pylist()}
            deletes.append((e["sequence_number"], names, keys))
    parts, files = [], []
    for e in live:
        f = e["data_file"]
        files.append(os.path.basename(f["file_path"]))
        if f["content"] != 0:
            continue
        t = pq.read_table(f["file_path"])
        keep = [
            r for r in t.to_pylist()
            if not any(seq > e["sequence_number"] and tuple(r[n] for n in names) in keys for seq, names, keys in deletes)
        ]
        parts.append(pa.Table.from_pylist(keep, schema=t.schema))
    rows = pa.concat_tables(parts) if parts else None
    return files, rows


def read(table, snapshot_id):
    """Data files and rows at a snapshot: pyiceberg's own scan, or over equality deletes the
    merge above."""
    scan = table.scan(snapshot_id=snapshot_id)
    try:
        files = [os.path.basename(t.file.file_path) for t in scan.plan_files()]
        return files, scan.to_arrow()
    except ValueError as e:
        if "equality deletes" not in str(e):
            raise
        return merged(table, snapshot_id)


def describe(table):
    snapshots = []
    for s in table.snapshots():
        summary = dict(s.summary.additional_properties)
        summary["operation"] = str(s.summary.operation.value)
        files, arrow = read(table, s.snapshot_id)
        count = arrow.num_rows if arrow is not None else 0
        snapshots.append(
            {"id": s.snapshot_id, "parent": s.parent_snapshot_id, "summary": summary, "files": sorted(files), "rows": count}
        )
    current = table.current_snapshot()
    rows = []
    if current:
        _, arrow = read(table, current.snapshot_id)
        rows = rows_of(arrow) if arrow is not None else []
    return {"snapshots": snapshots, "rows": rows, "schema": str(table.schema()), "spec": str(table.spec())}


def newest(metadata_dir):
    files = glob.glob(os.path.join(metadata_dir, "v*.metadata.json"))
    if not files:
        return None
    return max(files, key=lambda f: int(os.path.basename(f)[1:].split(".")[0]))


def main():
    cmd = sys.argv[1]
    if cmd == "table":
        from pyiceberg.table import StaticTable

        print(json.dumps(describe(StaticTable.from_metadata(sys.argv[2]))))
    elif cmd == "sql-table":
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog(sys.argv[3], uri=sys.argv[2])
        print(json.dumps(describe(catalog.load_table(sys.argv[4]))))
    elif cmd == "poll":
        # What a reader polling during a run sees: each snapshot it read, with the rows it
        # read there, one JSON line each, until the file STOP exists.
        from pyiceberg.table import StaticTable

        stop, out = sys.argv[3], sys.argv[4]
        seen = set()
        with open(out, "a") as f:
            while not os.path.exists(stop):
                m = newest(sys.argv[2])
                s = None
                if m:
                    try:
                        t = StaticTable.from_metadata(m)
                        s = t.current_snapshot()
                        if s and s.snapshot_id not in seen:
                            _, arrow = read(t, s.snapshot_id)
                            n = arrow.num_rows if arrow is not None else 0
                            seen.add(s.snapshot_id)
                            f.write(json.dumps({"id": s.snapshot_id, "rows": n}) + "\n")
                            f.flush()
                    except (OSError, ValueError):
                        pass  # a version being written, or removed by a restart
                time.sleep(0.02)
    elif cmd == "prune":
        from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan
        from pyiceberg.table import StaticTable

        t = StaticTable.from_metadata(sys.argv[2])
        col, lo, hi = sys.argv[3], sys.argv[4], sys.argv[5]
        scan = t.scan(row_filter=And(GreaterThanOrEqual(col, lo), LessThan(col, hi)))
        planned = sorted(os.path.relpath(p.file.file_path, t.location()) for p in scan.plan_files())
        every = sorted(os.path.relpath(p.file.file_path, t.location()) for p in t.scan().plan_files())
        print(json.dumps({"planned": planned, "all": every, "rows": rows_of(scan.to_arrow())}))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
