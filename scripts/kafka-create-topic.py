#!/usr/bin/env python3
"""Create a Kafka topic with a number of partitions, over the plain Kafka protocol
(CreateTopics v2), for benchmarks that need more partitions than a broker's auto-created
topics have:

    python3 scripts/kafka-create-topic.py HOST:PORT TOPIC PARTITIONS

A topic that exists already is left as it is."""
import socket
import struct
import sys


def i16(x):
    return struct.pack(">h", x)


def i32(x):
    return struct.pack(">i", x)


def string(text):
    b = text.encode()
    return i16(len(b)) + b


def main():
    address, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    host, port = address.rsplit(":", 1)
    # One topic: name, partitions, replication factor 1, no assignments, no configs; a 10 s
    # timeout; not only validated.
    body = i32(1) + string(topic) + i32(partitions) + i16(1) + i32(0) + i32(0) + i32(10000) + b"\x00"
    request = i16(19) + i16(2) + i32(1) + string("weir-create-topic") + body
    with socket.create_connection((host, int(port)), timeout=30) as c:
        c.sendall(i32(len(request)) + request)
        size = struct.unpack(">i", c.recv(4))[0]
        response = b""
        while len(response) < size:
            chunk = c.recv(size - len(response))
            if not chunk:
                sys.exit(f"creating topic '{topic}': the broker closed the connection")
            response += chunk
    # Correlation id, throttle time, one topic: its name, then its error code.
    name_len = struct.unpack(">h", response[12:14])[0]
    error = struct.unpack(">h", response[14 + name_len:16 + name_len])[0]
    if error not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
        sys.exit(f"creating topic '{topic}': Kafka error code {error}")


if __name__ == "__main__":
    main()
