"""The SQLite writer's own work per message, without the reactor or its thread: batches of
adds (each with a duplicate id, as a core bridge's target stores them) and of the
acknowledgements of the batch before, applied by the writer's statements and committed.

    .venv/bin/python -m benchmarks store-writer [--messages 100000] [--duplicate-ids 20000]

prints the CPU seconds per 100,000 messages added and acknowledged. Its work is the same
from run to run, so under valgrind's callgrind two message counts give the instructions
per message (the difference over the messages between them), a figure the machine's
speed does not move. It writes no JSON: a profile's harness, not a table's run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bridge.store.operations import (
    Acknowledge,
    AddMessage,
    CreateQueue,
    Operation,
    StoreDuplicateId,
)
from bridge.store.records import QueueRecord
from bridge.store.schema import connect
from bridge.store.sqlite_operations import apply_all, load_state

QUEUE = "bench"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks store-writer")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=64, help="adds per commit")
    parser.add_argument(
        "--duplicate-ids", type=int, default=20_000, metavar="KEEP", help="0: adds without"
    )
    args = parser.parse_args(argv)
    keep, batch = args.duplicate_ids, args.batch
    data = os.urandom(1100)
    with tempfile.TemporaryDirectory(prefix="store-writer-") as directory:
        connection = connect(Path(directory) / "messages.sqlite", 1.0)
        cursor = connection.cursor()
        state = load_state(cursor)

        def commit(operations: list[Operation]) -> None:
            cursor.execute("BEGIN IMMEDIATE")
            outcomes = apply_all(cursor, state, operations)
            cursor.execute("COMMIT")
            if any(outcomes):
                raise RuntimeError(f"refused: {next(o for o in outcomes if o)}")

        commit([CreateQueue(QueueRecord(QUEUE, QUEUE, "anycast"))])
        start = time.process_time()
        for first in range(1, args.messages + 1, batch):
            ids = range(first, min(first + batch, args.messages + 1))
            operations: list[Operation] = [
                AddMessage(
                    n,
                    (QUEUE,),
                    data,
                    duplicate=StoreDuplicateId(QUEUE, b"node-a:%d" % n, keep) if keep else None,
                )
                for n in ids
            ]
            operations += [Acknowledge(QUEUE, n) for n in range(max(1, first - batch), first)]
            commit(operations)
        seconds = time.process_time() - start
        connection.close()
    print(
        f"{args.messages:,} messages added and acknowledged, duplicate ids "
        f"{'for a cache of ' + format(keep, ',') if keep else 'none'}: "
        f"{seconds * 100_000 / max(args.messages, 1):.3f} CPU s per 100,000"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
