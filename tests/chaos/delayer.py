"""A packet delayer on NFQUEUE, for kernels without ``tc qdisc netem``.

Run inside a host's network namespace; an iptables rule (``-j NFQUEUE --queue-num N
--queue-bypass``) hands it the packets to delay. It speaks nfnetlink_queue over a raw
netlink socket (no library): binds queue N in copy-meta mode (it never needs the
payload), and for each packet schedules an ACCEPT verdict ``delay`` +- ``jitter`` ms
later, or a DROP with probability ``loss`` %. Verdict times never go backwards, so one
flow's packets keep their order, as a netem delay without reordering does. On SIGTERM it
accepts every packet it holds and exits. Prints "ready" once the queue is bound.

    python tests/chaos/delayer.py --queue 29 --delay-ms 100 --jitter-ms 20 --loss 1

Standard library only: it runs as a script under ``ip netns exec``.
"""

from __future__ import annotations

import argparse
import heapq
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
NF_DROP = 0
NF_ACCEPT = 1
NLA_TYPE_MASK = 0x3FFF


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


class Queue:
    def __init__(self, num: int) -> None:
        self.num = num
        self.seq = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self.sock.bind((0, 0))

    def send(self, msg_type: int, attrs: list[bytes], flags: int = NLM_F_REQUEST) -> None:
        self.seq += 1
        body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(self.num)) + b"".join(attrs)
        header = struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg_type,
                             flags, self.seq, 0)
        self.sock.send(header + body)

    def bind(self) -> None:
        cmd = struct.pack("=BBH", NFQNL_CFG_CMD_BIND, 0, socket.htons(socket.AF_INET))
        self.send(NFQNL_MSG_CONFIG, [_attr(NFQA_CFG_CMD, cmd)], NLM_F_REQUEST | NLM_F_ACK)
        self._expect_ack()
        params = struct.pack(">IB", 0, NFQNL_COPY_META)
        self.send(NFQNL_MSG_CONFIG, [_attr(NFQA_CFG_PARAMS, params)], NLM_F_REQUEST | NLM_F_ACK)
        self._expect_ack()
        maxlen = struct.pack(">I", 1 << 16)
        self.send(NFQNL_MSG_CONFIG, [_attr(NFQA_CFG_QUEUE_MAXLEN, maxlen)],
                  NLM_F_REQUEST | NLM_F_ACK)
        self._expect_ack()

    def _expect_ack(self) -> None:
        data = self.sock.recv(65536)
        _length, kind = struct.unpack_from("=IH", data)
        if kind == NLMSG_ERROR:
            (error,) = struct.unpack_from("=i", data, 16)
            if error:
                raise OSError(-error, f"nfnetlink_queue config refused (errno {-error})")

    def verdict(self, packet_id: int, verdict: int) -> None:
        self.send(NFQNL_MSG_VERDICT, [_attr(NFQA_VERDICT_HDR,
                                            struct.pack(">II", verdict, packet_id))])

    def packet_ids(self, data: bytes) -> list[int]:
        ids = []
        offset = 0
        while offset + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, offset)
            if length < 16:
                break
            if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                a = offset + 20  # nlmsghdr (16) + nfgenmsg (4)
                while a + 4 <= offset + length:
                    alen, atype = struct.unpack_from("=HH", data, a)
                    if alen < 4:
                        break
                    if atype & NLA_TYPE_MASK == NFQA_PACKET_HDR:
                        ids.append(struct.unpack_from(">I", data, a + 4)[0])
                    a += (alen + 3) & ~3
            offset += (length + 3) & ~3
        return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.0, help="percent of packets dropped")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    queue = Queue(args.queue)
    queue.bind()
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("ready", flush=True)
    held: list[tuple[float, int]] = []
    last_due = 0.0
    handled = dropped = 0
    while not stopping:
        now = time.monotonic()
        while held and held[0][0] <= now:
            _due, packet_id = heapq.heappop(held)
            queue.verdict(packet_id, NF_ACCEPT)
        timeout = max(0.0, held[0][0] - now) if held else 0.5
        try:
            readable, _, _ = select.select([queue.sock], [], [], timeout)
        except InterruptedError:
            continue
        if not readable:
            continue
        data = queue.sock.recv(1 << 16)
        now = time.monotonic()
        for packet_id in queue.packet_ids(data):
            handled += 1
            if args.loss and rng.random() * 100 < args.loss:
                dropped += 1
                queue.verdict(packet_id, NF_DROP)
                continue
            delay = args.delay_ms + rng.uniform(-args.jitter_ms, args.jitter_ms)
            due = max(last_due, now + max(0.0, delay) / 1000)
            last_due = due
            heapq.heappush(held, (due, packet_id))
    for _due, packet_id in held:
        queue.verdict(packet_id, NF_ACCEPT)
    print(f"stopped: {handled} packets, {dropped} dropped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
