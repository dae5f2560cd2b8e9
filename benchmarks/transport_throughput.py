"""Transport throughput: framed connections between two processes, against the ceiling.

For 1 KiB frames (frames/s) and 1 MiB frames (MB/s), over TCP and over TLS, it runs our
writer and reader processes, then plain Python sockets moving the same framed bytes (the
ceiling: nothing between the socket and the bytes), and reports ours / ceiling.

    python -m benchmarks transport [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.runner import peers, save
from transport.certs import DevelopmentCA

KIB, MIB = 1024, 1024 * 1024
CASES = (("1KiB", KIB, 256 * MIB), ("1MiB", MIB, 2048 * MIB))


def _tls_args(certs: Path, side: str) -> list[str]:
    if side == "reader":
        return ["--cert", str(certs / "node.pem"), "--key", str(certs / "node.key")]
    return ["--ca", str(certs / "ca.pem")]


def _one(role_prefix: str, scheme: str, frame: int, total: int, certs: Path) -> dict[str, Any]:
    """One transfer; the reader's first-to-last-byte time is the measure."""
    tls = scheme == "tls"
    with peers() as start:
        reader = start(
            [
                f"{role_prefix}reader",
                "--url",
                f"{scheme}://127.0.0.1:0",
                *([] if role_prefix else ["--once"]),
                "--frame-size",
                str(frame),
                *(_tls_args(certs, "reader") if tls else []),
            ]
        )
        port = reader.until("listening")["port"]
        writer = start(
            [
                f"{role_prefix}writer",
                "--url",
                f"{scheme}://127.0.0.1:{port}",
                "--bytes",
                str(total),
                "--frame-size",
                str(frame),
                *(_tls_args(certs, "writer") if tls else []),
            ]
        )
        writer.until("done")
        received = reader.until("received")
    elapsed = received["elapsed"]
    frames = total // frame
    return {
        "seconds": elapsed,
        "frames_per_s": frames / elapsed,
        "mb_per_s": received["received"] / elapsed / 1e6,
    }


def run(repeat: int, quick: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        certs = Path(folder)
        DevelopmentCA.open_or_create(certs).issue("node", server=True)
        for scheme in ("tcp", "tls"):
            for label, frame, full in CASES:
                total = full // 16 if quick else full
                ours = [_one("", scheme, frame, total, certs) for _ in range(repeat)]
                raw = [_one("raw-", scheme, frame, total, certs) for _ in range(repeat)]
                best_ours = statistics.median(r["mb_per_s"] for r in ours)
                best_raw = statistics.median(r["mb_per_s"] for r in raw)
                key = f"{scheme}_{label}"
                results[key] = {
                    "frame_bytes": frame,
                    "total_bytes": total,
                    "ours_frames_per_s": statistics.median(r["frames_per_s"] for r in ours),
                    "ours_mb_per_s": best_ours,
                    "raw_mb_per_s": best_raw,
                    "raw_frames_per_s": statistics.median(r["frames_per_s"] for r in raw),
                    "ratio_ours_to_raw": best_ours / best_raw,
                    "runs": {"ours": ours, "raw": raw},
                }
                print(
                    f"{key:10} ours {best_ours:8.1f} MB/s "
                    f"({results[key]['ours_frames_per_s']:>10,.0f} frames/s)   "
                    f"raw {best_raw:8.1f} MB/s   ours/raw {best_ours / best_raw:.2f}",
                    flush=True,
                )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks transport")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (median kept)")
    parser.add_argument("--quick", action="store_true", help="1/16 of the bytes, for a look")
    args = parser.parse_args(argv)
    results = run(args.repeat, args.quick)
    path = save("transport_throughput", {"repeat": args.repeat, "cases": results})
    print(f"saved {path}")
    return 0
