CREATE TABLE nexmark_q (id INT, la STRING, utc STRING, tokyo STRING, berlin STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, CONVERT_TZ(s, 'UTC', 'America/Los_Angeles'), CONVERT_TZ(s, 'Europe/Berlin', 'UTC'), CONVERT_TZ(s, 'GMT+01:00', 'Asia/Tokyo'), CONVERT_TZ(s, 'UTC', 'Europe/Berlin') FROM pairs;
