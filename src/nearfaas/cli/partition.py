"""`nearfaas partition`: split a particle dataset by ID bits (issue 19; docs/bitar.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from nearfaas.cli.common import Quantity, console, err, fail


def histogram(rows: dict, key: str, unit: str, width: int = 30) -> Table:
    """A per-part (or per-PE) bar chart as a Rich table."""
    t = Table(box=None, pad_edge=False)
    for col in (key.title(), unit.title(), "Share", ""):
        t.add_column(col, justify="right" if col not in ("", key.title()) else "left")
    total = sum(rows.values()) or 1
    top = max(rows.values(), default=0) or 1
    for name, v in rows.items():
        t.add_row(str(name), f"{v:,}", f"{100 * v / total:.1f}%", "█" * max(0, round(width * v / top)))
    return t


def _guess_key(obj: bytes, default: str) -> str:
    """The input's ID column when --key is not given: one of the datasets' ID fields, else ``id``."""
    import pyarrow as pa

    from nearfaas.dataservices.datasets import ID_FIELD

    try:
        names = pa.ipc.open_stream(pa.py_buffer(obj)).schema.names
    except (pa.ArrowInvalid, OSError):
        return default  # not a plain IPC stream: the partitioner says what is wrong with it
    return next((f for f in ID_FIELD.values() if f in names), default)


@click.command("partition")
@click.option("--dataset", type=click.Choice(["particles", "planes", "ships"]), default="planes", show_default=True,
              help="synthetic stand-in for the thesis's TrackML / OpenSky / NOAA data (docs/bitar.md)")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="an Arrow IPC stream file (or a Bitar frame of one) to split instead of a generated dataset")
@click.option("--key", help="the integer ID column to split on (default: the dataset's own ID field)")
@click.option("--size", type=Quantity(), default="64MB", show_default=True, help="generated table size, up to 1GB")
@click.option("--parts", type=int, default=4, show_default=True, help="output parts, a power of two (uses the low log2(parts) ID bits)")
@click.option("--codec", type=click.Choice(["none", "lz4", "zstd", "bitar"]), default="none", show_default=True,
              help="codec of the input object and of every output part (bitar: outer DEFLATE)")
@click.option("--method", type=click.Choice(["single", "kpass"]), default="single", show_default=True,
              help="single: one pass, sort by part; kpass: the thesis's one select per part")
@click.option("--engine", type=click.Choice(["isal", "libdeflate", "zlib"]), default="isal", show_default=True,
              help="Bitar's DEFLATE engine for --codec bitar")
@click.option("--threads", type=click.IntRange(1, 64), default=1, show_default=True, help="codec threads")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="write each part as PART.arrow here")
@click.option("--json", "as_json", is_flag=True, help="print {parts, unpack_s, split_s, repack_s, ...} as JSON")
def partition(dataset, input_path, key, size, parts, codec, method, engine, threads, seed, out_dir, as_json):
    """Unpack an Arrow object, split its rows by the low bits of the particle ID, repack each
    part — the thesis's §4.4.3 partitioning, timed step by step (measured on this host).

    \b
      nearfaas partition --dataset planes --parts 4 --codec zstd
      nearfaas partition --dataset particles --parts 16 --json     # only 3 parts fill: the IDs' low bits
      nearfaas partition --input table.arrow --key id --parts 8 --codec bitar
    """
    from nearfaas.bitar import Device
    from nearfaas.dataservices import datasets, partition as pt

    try:
        pt.check_parts(parts)
    except pt.PartitionError as e:
        fail(f"--parts: {e}")
    if not key and input_path:  # a file: its own ID column, if it has one of the known names
        key = "id"
    key = key or datasets.ID_FIELD[dataset]
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Device(engine, threads=threads) as dev, Progress(*columns, console=err, transient=as_json) as progress:
        step = progress.add_task("preparing the input", total=2)
        try:
            if input_path:
                obj = input_path.read_bytes()
                source = str(input_path)
                if key == "id":
                    key = _guess_key(obj, key)
            else:
                table = datasets.generate(dataset, size, seed)
                progress.advance(step)
                obj = pt.pack(table, codec, dev, threads)
                source = f"{dataset} (synthetic, {table.num_rows:,} rows, seed {seed})"
            progress.update(step, completed=2, description="partitioning: unpack, split, repack")
            result = pt.partition(obj, parts, key, codec, method, dev, threads)
        except (datasets.DatasetError, pt.PartitionError) as e:
            fail(str(e))
        progress.update(step, description="done")
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        for i, o in enumerate(result.outputs):
            (out_dir / f"{i}.arrow").write_bytes(o)
    summary = result.summary() | {"source": source, "key": key, "codec": codec, "method": method,
                                  "engine": engine if codec == "bitar" else None, "threads": threads}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    console.print(f"[bold]{source}[/bold]: {result.rows_in:,} rows, {result.bytes_in:,} bytes in ({codec}), "
                  f"split on the low {parts.bit_length() - 1} bits of {key} ({method})")
    t = Table(title="Timing breakdown (measured, wall clock)")
    for col in ("Step", "Seconds", "Share"):
        t.add_column(col, justify="left" if col == "Step" else "right")
    total = result.unpack_s + result.split_s + result.repack_s or 1
    for name, s in (("unpack", result.unpack_s), ("split", result.split_s), ("repack", result.repack_s)):
        t.add_row(name, f"{s:.4f}", f"{100 * s / total:.1f}%")
    console.print(t)
    console.print("Rows per part:")
    console.print(histogram({p: v["rows"] for p, v in result.parts.items()}, "part", "rows"))
    console.print("Bytes per part (serialized):")
    console.print(histogram({p: v["bytes"] for p, v in result.parts.items()}, "part", "bytes"))


COMMANDS = [partition]
