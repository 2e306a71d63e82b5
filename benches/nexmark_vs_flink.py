#!/usr/bin/env python3
"""Every Nexmark query both engines run, Weir and Flink 1.20.5 side by side in one run.

    python3 benches/nexmark_vs_flink.py --weir target/release/weir --data /tmp/nexmark \
        --queries q0,q1,... --out /tmp/nexmark-vs-flink [--repeat 2]

The queries are nexmark-flink's own text (../shared/nexmark-flink/qN.sql: a blackhole sink
and one INSERT), over the same CSV files for both engines (`person`, `auction` and `bid`
declared with Flink's column names and a 4 s watermark, as Flink's Nexmark views). Both run
at parallelism 1 with state in RocksDB and incremental checkpoints every second.

- Weir: each run a fresh `weir run` process; its CPU (user + sys) and peak RSS from the
  kernel's accounting of the child, its checkpoints' sizes and durations from its log.
- Flink: one JVM (PyFlink's local MiniCluster, ../shared/flink-anchor), warmed up on a small
  file first; each job's CPU is the JVM's CPU time across the job.

Events are the rows of the files the query reads (the same for both engines), so the ratio
is Flink's CPU over Weir's. The best of --repeat runs counts for each engine. Results are
JSON lines in OUT/results.jsonl and a table on stdout (also OUT/table.md).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "shared"))
QUERIES_DIR = os.path.join(SHARED, "nexmark-flink")
ANCHOR = os.path.join(SHARED, "flink-anchor")

COLUMNS = {
    "person": "id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR, city VARCHAR, state VARCHAR, "
    "`dateTime` TIMESTAMP(3), extra VARCHAR",
    "auction": "id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT, "
    "`dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra VARCHAR",
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, `dateTime` TIMESTAMP(3), "
    "extra VARCHAR",
}
FILES = {"person": "persons", "auction": "auctions", "bid": "bids"}
# Inputs sized so that Flink's run of each stays within a few minutes on 2 cores: the 5M-bid
# events for stateless queries and q3 (a join of the small tables), the 1M-bid events for
# the rest (with RocksDB, Flink's q4 over 5M bids runs longer than ten minutes).
FIVE_MILLION = {"q0", "q1", "q2", "q3", "q10", "q21", "q22"}
# q23 joins all three tables and its output grows with their product: Flink ran more than 30
# minutes on the 1M-bid events, so it reads the 100k ones.
HUNDRED_K = {"q23"}


def table_ddl(table, path):
    return (
        f"CREATE TABLE {table} ({COLUMNS[table]}, WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND) "
        f"WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')"
    )


def statements(text):
    lines = [l for l in text.splitlines() if not l.strip().startswith("--")]
    return [s.strip() for s in re.split(r";\s*(?:\n|$)", "\n".join(lines)) if s.strip()]


def tables_of(text):
    """The Nexmark tables a query reads."""
    found = re.findall(r"(?:FROM|JOIN|TABLE|,)\s+(person|auction|bid)\b", text, re.I)
    return sorted({t.lower() for t in found})


def count_lines(path):
    n = 0
    with open(path, "rb") as f:
        for buf in iter(lambda: f.read(1 << 20), b""):
            n += buf.count(b"\n")
    return n


def path_of(data, table, size):
    return os.path.join(data, f"{FILES[table]}_{size}.csv")


def run_weir(weir, query, text, data, size, workdir):
    """One `weir run` of the query: CPU, peak RSS, checkpoints."""
    ckpt = os.path.join(workdir, f"weir-ckpt-{query}")
    shutil.rmtree(ckpt, ignore_errors=True)
    ddl = [table_ddl(t, path_of(data, t, size)) for t in tables_of(text)]
    sql = [
        "SET 'parallelism' = '1'",
        "SET 'state.backend' = 'rocksdb'",
        "SET 'checkpoint.interval' = '1s'",
        f"SET 'checkpoint.dir' = '{ckpt}'",
        # A failure is reported, not retried.
        "SET 'restart.attempts' = '0'",
        # q12 windows by PROCTIME(): Weir refuses that under checkpoints unless told to accept
        # that a replay decides otherwise (Flink accepts it silently).
        "SET 'execution.allow-nondeterminism' = 'true'",
    ] + ddl + statements(text)
    job = os.path.join(workdir, f"{query}.sql")
    run_dir = f"weir-{time.time_ns()}"
    with open(job, "w") as f:
        f.write((";\n".join(sql) + ";\n").replace("${RUN}", run_dir))
    env = dict(os.environ, WEIR_LOG="info")
    t0 = time.time()
    p = subprocess.Popen([weir, "run", job], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = p.stderr.read().decode(errors="replace")
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - t0
    shutil.rmtree(ckpt, ignore_errors=True)
    if p.returncode != 0:
        lines = [l for l in err.splitlines() if "error" in l.lower()] or err.splitlines()[-3:]
        return {"error": " | ".join(lines)[:400]}
    cks = [(int(b), int(ms)) for b, ms in re.findall(r"checkpoint \d+ complete: (\d+) bytes in (\d+) ms", err)]
    return {
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "wall_s": wall,
        "peak_rss_mb": ru.ru_maxrss / 1024.0,
        "checkpoints": len(cks),
        "checkpoint_avg_bytes": sum(b for b, _ in cks) / len(cks) if cks else 0,
        "checkpoint_max_bytes": max((b for b, _ in cks), default=0),
        "checkpoint_avg_ms": sum(ms for _, ms in cks) / len(cks) if cks else 0,
    }


def run_flink(jobs, data, repeat, workdir):
    """All queries in one JVM, RocksDB with 1 s incremental checkpoints, p=1: JVM CPU per job."""
    sys.path.insert(0, ANCHOR)
    from flink_nexmark import _children_java_pids, _cpu_seconds  # noqa: E402
    from pyflink.table import EnvironmentSettings, TableEnvironment

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = t_env.get_config()
    ckpt = os.path.join(workdir, "flink-ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    for k, v in [
        ("parallelism.default", "1"),
        ("state.backend.type", "rocksdb"),
        ("execution.checkpointing.interval", "1s"),
        ("execution.checkpointing.incremental", "true"),
        ("execution.checkpointing.dir", f"file://{ckpt}"),
        # A failure is reported, not retried (with checkpoints Flink would restart forever).
        ("restart-strategy.type", "none"),
    ]:
        conf.set(k, v)
    pids = _children_java_pids()

    def declare(size, tables):
        for t in tables:
            t_env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS {t}")
            t_env.execute_sql(table_ddl(t, path_of(data, t, size)).replace("CREATE TABLE", "CREATE TEMPORARY TABLE", 1))

    def run(text):
        stmts = statements(text.replace("${RUN}", f"flink-{time.time_ns()}"))
        for st in stmts[:-1]:
            m = re.match(r"CREATE (TABLE|VIEW)\s+(\w+)", st, re.I)
            if m:
                kind = m.group(1).upper()
                t_env.execute_sql(f"DROP TEMPORARY {kind} IF EXISTS {m.group(2)}")
                st = st.replace(f"CREATE {m.group(1)}", f"CREATE TEMPORARY {kind}", 1)
            t_env.execute_sql(st)
        cpu0, t0 = _cpu_seconds(pids), time.time()
        t_env.execute_sql(stmts[-1]).get_job_client().get_job_execution_result().result()
        return {"cpu_s": _cpu_seconds(pids) - cpu0, "wall_s": time.time() - t0}

    # Warm the JIT up on the small files: every query once, untimed.
    for query, text, _ in jobs:
        try:
            declare("100k", tables_of(text))
            run(text)
        except Exception as e:  # a query Flink refuses is reported in the timed run
            print(f"# flink warm-up {query}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
    results = {}
    for query, text, size in jobs:
        runs = []
        for _ in range(repeat):
            try:
                declare(size, tables_of(text))
                runs.append(run(text))
            except Exception as e:
                runs.append({"error": str(e).splitlines()[0][:400]})
                break
        results[query] = runs
        print(f"# flink {query}: {runs}", file=sys.stderr, flush=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir", required=True)
    ap.add_argument("--data", default="/tmp/nexmark")
    # Flink 1.20 runs neither q6 (unsupported) nor q14 (its Java UDF), nor q13 (a lookup into
    # a table of the legacy 'connector.type' filesystem connector).
    ap.add_argument("--queries", default=",".join(f"q{i}" for i in range(24) if i not in (6, 13, 14)))
    ap.add_argument("--size", action="append", default=[], help="QUERY=SIZE (5m, 1m, 100k; default: see FIVE_MILLION)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default="/tmp/nexmark-vs-flink")
    ap.add_argument("--engines", default="weir,flink")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sizes = dict(s.split("=", 1) for s in args.size)
    jobs = []
    for q in [x.strip() for x in args.queries.split(",") if x.strip()]:
        text = open(os.path.join(QUERIES_DIR, f"{q}.sql")).read()
        # q10 writes files: under OUT, a directory per engine and run.
        text = text.replace("${NEXMARK_DIR}", os.path.abspath(args.out)).replace("${SUBMIT_TIME}", "${RUN}")
        default = "5m" if q in FIVE_MILLION else "100k" if q in HUNDRED_K else "1m"
        jobs.append((q, text, sizes.get(q, default)))
    events = {q: sum(count_lines(path_of(args.data, t, size)) for t in tables_of(text)) for q, text, size in jobs}

    weir = {}
    if "weir" in args.engines:
        for q, text, size in jobs:
            runs = [run_weir(args.weir, q, text, args.data, size, args.out) for _ in range(args.repeat)]
            weir[q] = runs
            print(f"# weir {q}: {runs}", file=sys.stderr, flush=True)
    flink = run_flink(jobs, args.data, args.repeat, args.out) if "flink" in args.engines else {}

    rows = []
    with open(os.path.join(args.out, "results.jsonl"), "a") as f:
        for q, text, size in jobs:
            rec = {"query": q, "size": size, "events": events[q], "tables": tables_of(text),
                   "weir": weir.get(q, []), "flink": flink.get(q, []), "ts": time.strftime("%Y-%m-%dT%H:%M:%S")}
            f.write(json.dumps(rec) + "\n")
            rows.append(rec)

    def best(runs):
        ok = [r for r in runs if "cpu_s" in r]
        return min(ok, key=lambda r: r["cpu_s"]) if ok else None

    head = ("| query | input | events | Weir events/CPU-s | Flink events/CPU-s | ratio | Weir peak RSS MB "
            "| Weir checkpoint avg (max) KB | Weir checkpoint avg ms |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        w, fl = best(r["weir"]), best(r["flink"])
        we = r["events"] / w["cpu_s"] if w else None
        fe = r["events"] / fl["cpu_s"] if fl else None
        ratio = f"{we / fe:.1f}x" if we and fe else "—"
        why = lambda runs: next((x["error"] for x in runs if "error" in x), "")
        lines.append(
            f"| {r['query']} | {r['size']} ({'+'.join(r['tables'])}) | {r['events']:,} "
            f"| {f'{we:,.0f}' if we else 'failed: ' + why(r['weir'])[:80]} "
            f"| {f'{fe:,.0f}' if fe else 'failed: ' + why(r['flink'])[:80]} | {ratio} "
            f"| {w['peak_rss_mb']:.0f} | {w['checkpoint_avg_bytes'] / 1024:,.0f} ({w['checkpoint_max_bytes'] / 1024:,.0f}) "
            f"| {w['checkpoint_avg_ms']:.0f} |"
            if w else
            f"| {r['query']} | {r['size']} | {r['events']:,} | failed: {why(r['weir'])[:120]} "
            f"| {f'{fe:,.0f}' if fe else 'failed'} | — | | | |"
        )
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
