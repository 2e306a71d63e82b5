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


def describe(table):
    snapshots = []
    for s in table.snapshots():
        summary = dict(s.summary.additional_properties)
        summary["operation"] = str(s.summary.operation.value)
        files = []
        scan = table.scan(snapshot_id=s.snapshot_id)
        added = [os.path.basename(t.file.file_path) for t in scan.plan_files()]
        count = scan.to_arrow().num_rows
        snapshots.append(
            {"id": s.snapshot_id, "parent": s.parent_snapshot_id, "summary": summary, "files": sorted(added), "rows": count}
        )
    current = table.current_snapshot()
    rows = rows_of(table.scan().to_arrow()) if current else []
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
                            n = t.scan(snapshot_id=s.snapshot_id).to_arrow().num_rows
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
