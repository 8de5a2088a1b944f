"""`nearfaas bitar …`: compress and decompress files through a Bitar device (issue 19; docs/bitar.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from nearfaas import atomic
from nearfaas.cli.common import console, err, fail

ENGINES = ["isal", "libdeflate", "zlib", "bf2-model"]


def _device(engine, threads, level, segment):
    from nearfaas.bitar import CodecError, Device

    try:
        return Device(engine, threads=threads, level=level, segment_size=segment)
    except CodecError as e:
        fail(str(e))


def _report(run, raw: int, packed: int, engine: str, as_json: bool, direction: str, to_stderr: bool) -> None:
    out = {"direction": direction, "engine": engine, "raw_bytes": raw, "frame_bytes": packed, "ratio": packed / raw if raw else None,
           "ops": run.ops, "wall_s": run.wall_s, "host_cpu_s": run.host_cpu_s, "engine_s": run.engine_s,
           "label": "engine_s modelled (bf2-model); wall_s and host_cpu_s measured" if engine == "bf2-model"
           else "measured on this host"}
    if as_json:
        click.echo(json.dumps(out, indent=2), err=to_stderr)
        return
    line = (f"{direction}: {raw:,} raw bytes <-> {packed:,} frame bytes (ratio {out['ratio'] or 0:.3f}), {run.ops} ops, "
            f"wall {run.wall_s * 1e3:.1f} ms, worker CPU {run.host_cpu_s * 1e3:.1f} ms (measured)")
    if engine == "bf2-model":
        line += f", engine {run.engine_s * 1e3:.2f} ms (modelled)"
    (err if to_stderr else console).print(line, markup=False, highlight=False)


@click.group()
def bitar():
    """Bitar: DEFLATE compression offload for serialization (the thesis's §5.2).

    \b
      nearfaas bitar compress table.arrow -o table.btr --engine isal --threads 2
      nearfaas bitar decompress table.btr -o table.arrow
      nearfaas bitar compress table.arrow -o t.btr --engine bf2-model --json   # engine time modelled

    A frame is a segment table plus raw DEFLATE streams: stock zlib (wbits -15) reads its payload.
    """


def _options(f):
    f = click.option("--json", "as_json", is_flag=True, help="print the run as JSON")(f)
    f = click.option("--segment", type=click.IntRange(1, 65536), default=65536, show_default=True,
                     help="raw bytes per op (the engine's packet limit is 64 KiB)")(f)
    f = click.option("--level", type=int, default=1, show_default=True, help="engine level (isal 0-3, libdeflate 1-12, zlib 0-9)")(f)
    f = click.option("--threads", type=click.IntRange(1, 64), default=1, show_default=True, help="worker threads (one queue pair each)")(f)
    f = click.option("--engine", type=click.Choice(ENGINES), default="isal", show_default=True)(f)
    f = click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True, help="where to write ('-' for stdout)")(f)
    return click.argument("src", type=click.Path(exists=True, dir_okay=False, path_type=Path))(f)


def _write(output: Path, data) -> None:
    if str(output) == "-":
        sys.stdout.buffer.write(data)
        return
    try:  # never a half-written output under the real name; a user's file: the usual 0644
        atomic.write_bytes(output, data, 0o644, durable=False)
    except OSError as e:
        fail(f"cannot write {output}: {e.strerror or e}")


def _run(src: Path, what):
    """Read SRC and run a device call on it; every failure is one clear line."""
    from nearfaas.bitar import CodecError

    try:
        return what(src.read_bytes())
    except CodecError as e:
        fail(f"{src}: {e}")
    except OSError as e:
        fail(f"cannot read {src}: {e.strerror or e}")
    except MemoryError:
        fail(f"{src} is too large to hold in memory here")


def _go(direction: str, src, output, engine, threads, level, segment, as_json) -> None:
    """Run SRC through a device one way, write the result, report it (raw vs frame bytes)."""
    with _device(engine, threads, level, segment) as dev:
        call = dev.run_compress if direction == "compress" else dev.run_decompress
        in_len, run = _run(src, lambda data: (len(data), call(data)))
    _write(output, run.output)
    raw, frame = (in_len, len(run.output)) if direction == "compress" else (len(run.output), in_len)
    _report(run, raw, frame, engine, as_json, direction, str(output) == "-")


@bitar.command("compress")
@_options
def compress_cmd(**options):
    """Compress SRC into a Bitar frame."""
    _go("compress", **options)


@bitar.command("decompress")
@_options
def decompress_cmd(**options):
    """Decompress a Bitar frame SRC (any engine reads any engine's frames)."""
    _go("decompress", **options)


COMMANDS = [bitar]
