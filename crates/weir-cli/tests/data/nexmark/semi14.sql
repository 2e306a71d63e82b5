-- Weir's semi and anti join test (semi14); Flink's rows in semi14.flink.csv.

CREATE TABLE nexmark_semi14 (
  channel VARCHAR
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi14
SELECT channel FROM bid WHERE price < 1000 AND channel IN (SELECT channel FROM bid WHERE price > 9000000);
