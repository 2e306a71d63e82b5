CREATE TABLE nexmark_q (bidtime TIMESTAMP(3), price DECIMAL(10, 2), item STRING, supplier_id STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), window_time TIMESTAMP(3)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT * FROM TABLE(
    CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES));
