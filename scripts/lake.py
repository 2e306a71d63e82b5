"""The tests' independent reader of Iceberg tables (pyiceberg over pyarrow) and encoder and
decoder of Avro (fastavro). Prints JSON on stdout.

  lake.py table METADATA_JSON                      snapshots and rows of a hadoop-catalog table
  lake.py sql-table URI CATALOG NAMESPACE.TABLE     the same through pyiceberg's SqlCatalog
  lake.py poll METADATA_DIR STOP OUT               scan each new snapshot until the file STOP exists
  lake.py prune METADATA_JSON COLUMN FROM TO       files planned for FROM <= COLUMN < TO, and rows
  lake.py count METADATA_JSON|PARQUET_DIR           rows of the table's current snapshot, or of the files
  lake.py registry PORT_FILE [USER:PASSWORD]       a stand-in for a Confluent schema registry (its REST
                                                   API's few calls Weir makes), until killed
  lake.py rest-catalog PORT_FILE SQL_URI WAREHOUSE TOKEN
                                                   a stand-in for an Iceberg REST catalog (the calls
                                                   Weir makes), backed by pyiceberg's SqlCatalog
  lake.py rest-table URL TOKEN NAMESPACE.TABLE      snapshots and rows through pyiceberg's RestCatalog
  lake.py avro-encode URL|- SUBJECT SCHEMA ROWS    fastavro-encoded rows (JSON lines), hex, one a line:
                                                   framed with the id the registry gives (or plain: -)
  lake.py avro-file-write SCHEMA ROWS OUT CODEC    an Avro object container file of the rows (JSON lines)
  lake.py avro-file-read DIR                       rows of every .avro file under DIR (JSON lines,
                                                   sorted), and each file's codec and schema name
  lake.py avro-decode URL|SCHEMA VALUES            hex values decoded by fastavro, with each writer
                                                   schema from the registry (or one plain SCHEMA)
"""
import glob
import http.server
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


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A stand-in server's handler: JSON replies, no request log."""

    content_type = "application/json"

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve(port_file, handler):
    """Serve on a free loopback port, written to PORT_FILE once listening, until killed."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


def registry(port_file, user_info):
    """Schemas by id and subjects in memory: GET /schemas/ids/ID, POST /subjects/S/versions
    (register; the same schema twice keeps its id), POST /subjects/S (look up), GET
    /subjects/S/versions/latest. With USER:PASSWORD, requests without that basic auth (or the
    bearer token PASSWORD) get 401."""
    import base64
    import threading

    lock = threading.Lock()
    schemas = {}  # id -> schema text
    subjects = {}  # subject -> [id, ...]

    def canonical(text):
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))

    class Handler(JsonHandler):
        content_type = "application/vnd.schemaregistry.v1+json"

        def authorized(self):
            if user_info is None:
                return True
            want = ["Basic " + base64.b64encode(user_info.encode()).decode(), "Bearer " + user_info.split(":", 1)[1]]
            if self.headers.get("Authorization") in want:
                return True
            self.reply(401, {"error_code": 401, "message": "Unauthorized"})
            return False

        def do_GET(self):
            if not self.authorized():
                return
            parts = self.path.strip("/").split("/")
            with lock:
                if parts[:2] == ["schemas", "ids"] and int(parts[2]) in schemas:
                    return self.reply(200, {"schema": schemas[int(parts[2])]})
                if parts[0] == "subjects" and parts[2:] == ["versions", "latest"] and parts[1] in subjects:
                    ids = subjects[parts[1]]
                    return self.reply(200, {"subject": parts[1], "version": len(ids), "id": ids[-1], "schema": schemas[ids[-1]]})
            code = 40403 if parts[0] == "schemas" else 40401
            self.reply(404, {"error_code": code, "message": "not found"})

        def do_POST(self):
            if not self.authorized():
                return
            parts = self.path.strip("/").split("/")
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            text = canonical(body["schema"])
            with lock:
                found = [i for i, s in schemas.items() if canonical(s) == text]
                if parts[0] == "subjects" and parts[2:] == ["versions"]:
                    sid = found[0] if found else len(schemas) + 1
                    schemas.setdefault(sid, body["schema"])
                    if sid not in subjects.setdefault(parts[1], []):
                        subjects[parts[1]].append(sid)
                    return self.reply(200, {"id": sid})
                if parts[0] == "subjects" and len(parts) == 2:
                    if parts[1] not in subjects:
                        return self.reply(404, {"error_code": 40401, "message": "Subject not found"})
                    mine = [i for i in subjects[parts[1]] if i in found]
                    if not mine:
                        return self.reply(404, {"error_code": 40403, "message": "Schema not found"})
                    return self.reply(200, {"subject": parts[1], "id": mine[0], "version": 1, "schema": schemas[mine[0]]})
            self.reply(404, {"error_code": 404, "message": "not found"})

    serve(port_file, Handler)


def rest_catalog(port_file, uri, warehouse, token):
    """The Iceberg REST catalog's calls a writer makes, served from pyiceberg's SqlCatalog, so
    that requirements and updates are checked and applied by pyiceberg's own code:
    GET /v1/config, POST /v1/oauth/tokens (client credentials `weir:secret` give TOKEN),
    POST /v1/{prefix}/namespaces, GET and POST /v1/{prefix}/namespaces/NS/tables[/T].
    Every other call needs `Authorization: Bearer TOKEN`. Errors are the spec's ErrorModel."""
    import threading
    import urllib.parse

    from pyiceberg.catalog.rest import CreateTableRequest
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import (
        CommitFailedException, NamespaceAlreadyExistsError, NoSuchNamespaceError, NoSuchTableError,
        TableAlreadyExistsError,
    )
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.table import CommitTableRequest

    catalog = SqlCatalog("rest-backing", uri=uri, warehouse="file://" + warehouse)
    lock = threading.Lock()
    prefix = "cat1"

    def loaded(table):
        return {"metadata-location": table.metadata_location, "metadata": json.loads(table.metadata.model_dump_json(by_alias=True, exclude_none=True)), "config": {}}

    class Handler(JsonHandler):
        def error(self, code, kind, message):
            self.reply(code, {"error": {"message": message, "type": kind, "code": code}})

        def route(self):
            url = urllib.parse.urlsplit(self.path)
            parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
            if parts[:2] == ["v1", "oauth"]:
                return parts, url
            if self.headers.get("Authorization") != "Bearer " + token:
                self.error(401, "NotAuthorizedException", "Not authorized")
                return None, url
            return parts, url

        def body(self):
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

        def do_GET(self):
            parts, url = self.route()
            if parts is None:
                return
            with lock:
                if parts == ["v1", "config"]:
                    return self.reply(200, {"defaults": {}, "overrides": {"prefix": prefix}})
                if parts[:3] == ["v1", prefix, "namespaces"] and len(parts) == 6 and parts[4] == "tables":
                    try:
                        return self.reply(200, loaded(catalog.load_table((parts[3], parts[5]))))
                    except NoSuchTableError as e:
                        return self.error(404, "NoSuchTableException", str(e))
            self.error(404, "NotFoundException", "no route " + url.path)

        def do_POST(self):
            parts, url = self.route()
            if parts is None:
                return
            if parts == ["v1", "oauth", "tokens"]:
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
                if form.get("client_id") == ["weir"] and form.get("client_secret") == ["secret"]:
                    return self.reply(200, {"access_token": token, "token_type": "bearer", "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"})
                return self.reply(401, {"error": "invalid_client", "error_description": "bad credentials"})
            body = self.body()
            with lock:
                if parts == ["v1", prefix, "namespaces"]:
                    try:
                        catalog.create_namespace(tuple(body["namespace"]), body.get("properties", {}))
                        return self.reply(200, {"namespace": body["namespace"], "properties": {}})
                    except NamespaceAlreadyExistsError as e:
                        return self.error(409, "AlreadyExistsException", str(e))
                if parts[:3] == ["v1", prefix, "namespaces"] and len(parts) == 5 and parts[4] == "tables":
                    for optional in ("location", "partition-spec", "write-order"):
                        body.setdefault(optional, None)
                    req = CreateTableRequest.model_validate(body)
                    try:
                        t = catalog.create_table(
                            (parts[3], req.name), req.table_schema, req.location,
                            req.partition_spec or UNPARTITIONED_PARTITION_SPEC, properties=req.properties,
                        )
                        return self.reply(200, loaded(t))
                    except NoSuchNamespaceError as e:
                        return self.error(404, "NoSuchNamespaceException", str(e))
                    except TableAlreadyExistsError as e:
                        return self.error(409, "AlreadyExistsException", str(e))
                if parts[:3] == ["v1", prefix, "namespaces"] and len(parts) == 6 and parts[4] == "tables":
                    req = CommitTableRequest.model_validate({"identifier": {"namespace": [parts[3]], "name": parts[5]}, **body})
                    try:
                        t = catalog.load_table((parts[3], parts[5]))
                        r = catalog.commit_table(t, req.requirements, req.updates)
                        return self.reply(200, {"metadata-location": r.metadata_location, "metadata": json.loads(r.metadata.model_dump_json(by_alias=True, exclude_none=True))})
                    except NoSuchTableError as e:
                        return self.error(404, "NoSuchTableException", str(e))
                    except CommitFailedException as e:
                        return self.error(409, "CommitFailedException", str(e))
            self.error(404, "NotFoundException", "no route " + url.path)

    serve(port_file, Handler)


def _registry_call(url, method, path, body=None):
    """A call to the registry; `http://user:password@host:port` sends basic auth."""
    import base64
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    plain = f"{parts.scheme}://{parts.hostname}:{parts.port}"
    req = urllib.request.Request(plain + path, method=method, data=json.dumps(body).encode() if body else None)
    req.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
    if parts.username:
        token = base64.b64encode(f"{parts.username}:{parts.password}".encode()).decode()
        req.add_header("Authorization", "Basic " + token)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def avro_encode(url, subject, schema_file, rows_file):
    import io
    import fastavro

    text = open(schema_file).read()
    schema = fastavro.parse_schema(json.loads(text))
    prefix = b""
    if url != "-":
        sid = _registry_call(url, "POST", f"/subjects/{subject}/versions", {"schema": text})["id"]
        prefix = b"\x00" + sid.to_bytes(4, "big")
    for line in open(rows_file):
        if not line.strip():
            continue
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, json.loads(line))
        print((prefix + buf.getvalue()).hex())


def avro_decode(source, values_file):
    import io
    import fastavro

    cache = {}
    plain = None if source.startswith("http") else fastavro.parse_schema(json.loads(open(source).read()))
    for line in open(values_file):
        if not line.strip():
            continue
        value = bytes.fromhex(line.strip())
        if plain is not None:
            schema, body = plain, value
        else:
            assert value[0] == 0, "not Confluent-framed"
            sid = int.from_bytes(value[1:5], "big")
            if sid not in cache:
                cache[sid] = fastavro.parse_schema(json.loads(_registry_call(source, "GET", f"/schemas/ids/{sid}")["schema"]))
            schema, body = cache[sid], value[5:]
        row = fastavro.schemaless_reader(io.BytesIO(body), schema)
        print(json.dumps(row, default=str, sort_keys=True))


def avro_file_write(schema_file, rows_file, out, codec):
    import fastavro

    schema = fastavro.parse_schema(json.loads(open(schema_file).read()))
    rows = [json.loads(line) for line in open(rows_file) if line.strip()]
    with open(out, "wb") as f:
        fastavro.writer(f, schema, rows, codec=codec)


def avro_file_read(directory):
    import fastavro

    rows, files = [], []
    for path in sorted(glob.glob(os.path.join(directory, "**", "*.avro"), recursive=True)):
        if os.path.basename(path).startswith((".", "_")):
            continue
        with open(path, "rb") as f:
            reader = fastavro.reader(f)
            files.append({"codec": reader.codec, "schema": reader.writer_schema.get("name")})
            rows.extend(json.dumps(r, default=str, sort_keys=True) for r in reader)
    print(json.dumps({"rows": sorted(rows), "files": files}))


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
    elif cmd == "count":
        # Rows of a table's current snapshot, or of a directory of Parquet files.
        if sys.argv[2].endswith(".json"):
            from pyiceberg.table import StaticTable

            print(json.dumps(StaticTable.from_metadata(sys.argv[2]).scan().to_arrow().num_rows))
        else:
            import pyarrow.dataset as ds

            print(json.dumps(ds.dataset(sys.argv[2], format="parquet", ignore_prefixes=[".", "_"]).count_rows()))
    elif cmd == "registry":
        registry(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    elif cmd == "rest-catalog":
        rest_catalog(*sys.argv[2:6])
    elif cmd == "rest-table":
        from pyiceberg.catalog.rest import RestCatalog

        catalog = RestCatalog("rest", uri=sys.argv[2], token=sys.argv[3])
        print(json.dumps(describe(catalog.load_table(sys.argv[4]))))
    elif cmd == "avro-encode":
        avro_encode(*sys.argv[2:6])
    elif cmd == "avro-file-write":
        avro_file_write(*sys.argv[2:6])
    elif cmd == "avro-file-read":
        avro_file_read(sys.argv[2])
    elif cmd == "avro-decode":
        avro_decode(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
