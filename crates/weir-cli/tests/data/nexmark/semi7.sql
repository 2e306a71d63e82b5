-- Weir's semi and anti join test (semi7); Flink's rows in semi7.flink.csv.

CREATE TABLE nexmark_semi7 (
  auction BIGINT,
  price BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi7
SELECT B.auction, B.price FROM bid B WHERE B.auction IN (SELECT auction FROM bid GROUP BY auction HAVING count(*) % 2 = 0);
