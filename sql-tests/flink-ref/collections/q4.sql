CREATE TABLE nexmark_q (tag STRING, n BIGINT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT tag, COUNT(*) FROM (
  SELECT id, tags FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY ver DESC) AS rn FROM orders) WHERE rn = 1
) AS latest CROSS JOIN UNNEST(latest.tags) AS t (tag)
GROUP BY tag;
