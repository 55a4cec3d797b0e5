"""Benchmark: streaming a version from far storage vs the usual ways of reading it, in one run.

    python -m pipeline.bench.read --latency-ms 50 [--conn-mbps 50] [--mb 256]

A SeaweedFS S3 server (subprocess) behind `LatencyProxy` (first-byte latency L, each connection
capped at --conn-mbps), a synthetic version of --mb MiB of tokens in ~--shard-mb shards (written
with ShardWriter + commit_manifest), and the same tokens read five ways:
  (a) stream     StreamReader through the proxy, sized by the plan for L and the cap, windows in
                 stream order (shuffle_windows=False)
  (b) no-lat     StreamReader, the same request size and depth, 0 ms injected, same cap, in order
  (e) shuffled   as (a), with shuffle_windows on (the reader's default): the cost of shuffling
  (c) per-doc    --docs documents stored as one object each, read by --doc-threads threads (a
                 typical data loader), one GET per document, through the proxy with L
  (d) sync-shard whole shards, one GET at a time, no prefetch (Megatron's S3 reader), with L
Checks: (d) matches every shard's manifest xxh3-128; (a) and (b) yield exactly the shards' tokens
(xxh3 of the streamed tokens == xxh3 over the shards read in (d)); (e) yields the same windows
as (a) (sum of the windows' xxh3-64); (c) equals the start of a shard.
Rates are tokens/s while reading (opening a version, a few small requests, is shown apart); (a),
(b) and (e) run --repeat times alternately and the best of each is kept, to damp a shared machine.
(b) keeps (a)'s plan on purpose, so that (a) and (b) differ in the injected latency alone (a 0 ms
plan would choose smaller requests, and measure the local server's per-request cost).
Last line: JSON with stream_tokens_per_s and the ratios (targets >= 0.8, >= 20, >= 2), and
shuffled_tokens_per_s with shuffled_vs_stream.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import xxhash

from pipeline.cli import args as cli_args
from pipeline.config.sections import StorageConfig
from pipeline.core.storage import Location
from pipeline.core.units import MiB
from pipeline.formats.manifest import load_manifest
from pipeline.formats.megatron import decode_index
from pipeline.stream.reader import StreamReader
from pipeline.stream.windows import shard_order
from pipeline.testing.latency_proxy import LatencyProxy
from pipeline.testing.s3 import dummy_aws_env, seaweedfs_server
from pipeline.testing.synthetic import write_version

BUCKET = "bench-read"


def stream(uri: str, storage: StorageConfig, seq_len: int, **kwargs) -> dict:
    t0 = time.perf_counter()
    reader = StreamReader(uri, seq_len, storage=storage, **kwargs)
    opened = time.perf_counter() - t0
    digest, windows, last, window_sum = xxhash.xxh3_64(), 0, None, 0
    t0 = time.perf_counter()
    with reader:
        for window in reader:
            digest.update(window[:-1])  # windows overlap by one token: hash each token once
            window_sum += xxhash.xxh3_64_intdigest(window)  # the same in any order
            windows, last = windows + 1, window
    seconds = time.perf_counter() - t0
    if last is not None:
        digest.update(last[-1:])
    return {
        "seconds": seconds,
        "open_s": opened,
        "tokens": windows * seq_len,
        "digest": digest.hexdigest(),
        "window_sum": window_sum % 2**64,
        "plan": reader.plan,
        "shuffle_group": reader.shuffle_group,
        "stats": reader.stats,
    }


def sync_shards(version: Location, seed: int, stream_tokens: int) -> dict:
    """Whole shards in stream order, one GET at a time; the reference digest of the stream."""
    manifest = load_manifest(version)
    digest, left, tokens = xxhash.xxh3_64(), stream_tokens, 0
    t0 = time.perf_counter()
    for k in shard_order(len(manifest["shards"]), seed, 0):
        shard = manifest["shards"][k]
        data = (version / shard["bin"]).read_bytes(0, None)  # one GET ("bytes=0-"), no HEAD
        if xxhash.xxh3_128_hexdigest(data) != shard["bin_xxh3_128"]:
            raise RuntimeError(f"{shard['bin']}: bytes differ from the manifest")
        part = np.frombuffer(data, np.uint16)[: max(left, 0)]
        digest.update(part)
        left -= len(part)
        tokens += shard["tokens"]
    return {"seconds": time.perf_counter() - t0, "tokens": tokens, "digest": digest.hexdigest()}


def upload_documents(version: Location, docs_root: Location, count: int) -> tuple[list[str], str]:
    """The first `count` documents of shard 0 as one object each; digest of their tokens."""
    shard = load_manifest(version)["shards"][0]
    info = decode_index((version / shard["idx"]).read_bytes())
    count = min(count, info.sequence_count)
    end = int(info.pointers[count - 1]) + int(info.lengths[count - 1]) * 2
    data = (version / shard["bin"]).read_bytes(0, end)
    bounds = [*info.pointers[:count].tolist(), end]
    objects = {
        f"{docs_root.path}/{i:06d}.bin": data[bounds[i] : bounds[i + 1]] for i in range(count)
    }
    docs_root.fs.pipe(objects)
    return sorted(objects), xxhash.xxh3_64_hexdigest(data)


def per_document(fs_root: Location, keys: list[str], threads: int) -> dict:
    def get(key: str) -> bytes:
        return Location(fs_root.fs, key).read_bytes(0, None)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(get, keys))
    seconds = time.perf_counter() - t0
    data = b"".join(parts)
    return {"seconds": seconds, "tokens": len(data) // 2, "digest": xxhash.xxh3_64_hexdigest(data)}


def seconds(result: dict) -> float:
    return result["seconds"]


def rate(result: dict) -> float:
    return result["tokens"] / result["seconds"]


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench read",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--latency-ms", type=float, default=50.0, help="first-byte latency the proxy adds"
    )
    parser.add_argument("--conn-mbps", type=float, default=50.0, help="per connection, MB/s")
    parser.add_argument("--mb", type=int, default=256, help="MiB of tokens in the version")
    parser.add_argument("--shard-mb", type=int, default=64, help="MiB of tokens per shard")
    parser.add_argument("--seq-len", type=int, default=2048, help="tokens per training sample read")
    parser.add_argument("--docs", type=int, default=1000, help="documents read one object each")
    parser.add_argument(
        "--doc-threads", type=int, default=8, help="threads reading the one-object documents"
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs of (a) and (b), best kept")
    parser.add_argument("--target-mbps", type=float, help="reader target, MB/s (default: plan's)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    latency, bandwidth = args.latency_ms / 1000, args.conn_mbps * 1e6
    shard_tokens = [args.shard_mb * MiB // 2] * (args.mb // args.shard_mb)
    if args.mb % args.shard_mb:
        shard_tokens.append(args.mb % args.shard_mb * MiB // 2)

    with dummy_aws_env(), seaweedfs_server() as endpoint:
        direct = StorageConfig(endpoint_url=endpoint)
        root = Location.from_uri(f"s3://{BUCKET}", direct)
        root.fs.mkdir(BUCKET)
        t0 = time.perf_counter()
        version = write_version(root / "data/bench", shard_tokens, name="bench", seed=1)
        keys, docs_digest = upload_documents(version, root / "docs", args.docs)
        print(
            f"setup: {args.mb} MiB in {len(shard_tokens)} shards + {len(keys)} document objects"
            f" written to SeaweedFS in {time.perf_counter() - t0:.1f} s"
        )

        with LatencyProxy(endpoint, latency, bandwidth) as proxy:
            via_proxy = StorageConfig(endpoint_url=proxy.endpoint, max_pool_connections=64)
            target = args.target_mbps * 1e6 if args.target_mbps else None
            sized = {
                "latency_s": latency,
                "bandwidth_bytes_per_s": bandwidth,
                "target_bytes_per_s": target,
            }
            runs_a, runs_b, runs_e = [], [], []
            for _ in range(args.repeat):  # alternate (a), (b) and (e); keep the best of each
                proxy.latency_s = latency
                proxy.reset_counters()
                runs_a.append(
                    stream(version.uri, via_proxy, args.seq_len, **sized, shuffle_windows=False)
                )
                a_proxy = proxy.counters()
                plan = runs_a[0]["plan"]
                proxy.latency_s = 0.0
                runs_b.append(
                    stream(
                        version.uri,
                        via_proxy,
                        args.seq_len,
                        **sized,
                        request_bytes=plan.request_bytes,
                        inflight=plan.inflight,
                        shuffle_windows=False,
                    )
                )
                proxy.latency_s = latency
                runs_e.append(stream(version.uri, via_proxy, args.seq_len, **sized))
            a, b = min(runs_a, key=seconds), min(runs_b, key=seconds)
            e = min(runs_e, key=seconds)
            proxy.latency_s = latency
            docs_root = Location.from_uri(f"s3://{BUCKET}/docs", via_proxy)
            c = per_document(docs_root, keys, args.doc_threads)
            d = sync_shards(Location.from_uri(version.uri, via_proxy), 0, a["tokens"] + 1)

    checks = {
        "stream == shards": all(r["digest"] == d["digest"] for r in runs_a),
        "no-latency stream == shards": all(r["digest"] == d["digest"] for r in runs_b),
        "documents == shard 0 prefix": c["digest"] == docs_digest,
        "shuffled stream == same windows": all(r["window_sum"] == a["window_sum"] for r in runs_e),
    }
    print(
        f"plan: request {plan.request_bytes / MiB:.0f} MiB, {plan.inflight} in flight (Little:"
        f" {plan.little_inflight}), buffer cap {plan.max_buffer_bytes / MiB:.0f} MiB;"
        f" proxy saw {a_proxy.requests} requests, max {a_proxy.max_active} active;"
        f" reader max buffered {a['stats'].max_buffered_bytes / MiB:.0f} MiB"
    )
    print(f"{'way':<34}{'tokens':>12}{'seconds':>9}{'Mtok/s':>9}{'MB/s':>8}")
    rows = [
        (f"(a) stream, {args.latency_ms:.0f} ms", a),
        ("(b) stream, 0 ms injected", b),
        (f"(c) per-document x{args.doc_threads} threads", c),
        ("(d) sync whole shards", d),
        (f"(e) stream shuffled, {args.latency_ms:.0f} ms", e),
    ]
    for label, r in rows:
        print(
            f"{label:<34}{r['tokens']:>12,}{r['seconds']:>9.2f}{rate(r) / 1e6:>9.2f}"
            f"{rate(r) * 2 / 1e6:>8.1f}"
        )
    print(f"open (manifest) time: stream {a['open_s']:.2f} s, no-latency {b['open_s']:.2f} s")
    print("checks: " + ", ".join(f"{k}: {'ok' if v else 'FAILED'}" for k, v in checks.items()))
    print(
        json.dumps(
            {
                "stream_tokens_per_s": round(rate(a)),
                "stream_vs_no_latency": round(rate(a) / rate(b), 3),
                "stream_vs_per_doc": round(rate(a) / rate(c), 1),
                "stream_vs_sync_shard": round(rate(a) / rate(d), 2),
                "latency_ms": args.latency_ms,
                "conn_mbps": args.conn_mbps,
                "mb": args.mb,
                "request_mib": plan.request_bytes / MiB,
                "inflight": plan.inflight,
                "checks_ok": all(checks.values()),
                "shuffled_tokens_per_s": round(rate(e)),
                "shuffled_vs_stream": round(rate(e) / rate(a), 3),
                "shuffle_group_windows": e["shuffle_group"],
            }
        )
    )


if __name__ == "__main__":
    main()
