"""Particle datasets and the partition service (issue 19): schemas as the thesis describes,
the low-ID-bit diversity each dataset is meant to have, partitions that lose and duplicate
nothing under every codec and both methods, and clear errors for bad inputs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from nearfaas.bitar import Device
from nearfaas.dataservices import datasets, partition as pt

SMALL = 400_000  # bytes: enough rows for the bit statistics, quick to build


@pytest.fixture(scope="module")
def tables():
    return {name: datasets.generate(name, SMALL, seed=3) for name in datasets.NAMES}


@pytest.fixture(scope="module")
def device():
    with Device("isal", threads=2) as dev:
        yield dev


def test_schemas_match_the_thesis(tables):
    assert tables["particles"].num_columns == 10
    assert all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in tables["particles"].schema.types)
    assert tables["planes"].num_columns == 16 and pa.types.is_string(tables["planes"].schema.field("callsign").type)
    assert tables["ships"].num_columns == 17 and pa.types.is_string(tables["ships"].schema.field("vessel_name").type)


def test_sizes_follow_the_target():
    for name in datasets.NAMES:
        t = datasets.generate(name, 2_000_000, seed=1)
        assert 1_800_000 <= t.nbytes <= 2_200_000, (name, t.nbytes)
    assert datasets.generate("planes", SMALL, seed=9).equals(datasets.generate("planes", SMALL, seed=9))


def part_shares(table, field, parts):
    low = datasets.ids(table, field) & np.uint64(parts - 1)
    return np.bincount(low.astype(np.int64), minlength=parts) / table.num_rows


def test_low_id_bits_are_as_diverse_as_the_thesis_found():
    big = {name: datasets.generate(name, 4_000_000, seed=5) for name in datasets.NAMES}
    particles = part_shares(big["particles"], "particle_id", 16)
    assert (particles > 0).sum() == 3  # "its IDs can only be split into three partitions"
    planes = part_shares(big["planes"], "icao24", 16)
    assert planes.min() > 0.5 / 16 and planes.max() < 1.6 / 16  # roughly equal parts
    ships = part_shares(big["ships"], "mmsi", 16)
    assert ships.max() / ships.min() > planes.max() / planes.min()  # more uneven than planes


@pytest.mark.parametrize("codec", pt.CODECS)
@pytest.mark.parametrize("method", pt.METHODS)
@pytest.mark.parametrize("name", datasets.NAMES)
def test_partitions_conserve_rows_and_place_each_by_its_bits(tables, device, name, codec, method):
    table, key, parts = tables[name], datasets.ID_FIELD[name], 4
    obj = pt.pack(table, codec, device)
    r = pt.partition(obj, parts, key, codec, method, device)
    assert r.rows_in == table.num_rows == sum(v["rows"] for v in r.parts.values())
    back = [pt.unpack(o, device) for o in r.outputs]
    for p, t in enumerate(back):
        assert set((datasets.ids(t, key) & np.uint64(parts - 1)).tolist()) <= {p}
    merged = pa.concat_tables(back).sort_by([(key, "ascending"), (table.column_names[1], "ascending")])
    assert merged.equals(table.sort_by([(key, "ascending"), (table.column_names[1], "ascending")]))


def test_both_methods_give_the_same_parts(tables):
    t = tables["ships"]
    a = pt.split(t, 8, "mmsi", "single")
    b = pt.split(t, 8, "mmsi", "kpass")
    assert [x.num_rows for x in a] == [x.num_rows for x in b]
    assert all(x.equals(y) for x, y in zip(a, b, strict=True))  # stable: rows keep their input order


@pytest.mark.parametrize("parts", [0, 3, 6, -4, 2.0, 1 << 17])
def test_parts_must_be_a_power_of_two(tables, parts):
    with pytest.raises(pt.PartitionError, match="power of two"):
        pt.split(tables["planes"], parts, "icao24")


def test_a_non_arrow_object_is_a_clear_error():
    with pytest.raises(pt.PartitionError, match="not an Arrow IPC stream"):
        pt.partition(b"this is a csv,not,arrow\n1,2,3\n", 4, "id")


def test_a_missing_or_non_integer_key_names_the_columns(tables):
    obj = pt.pack(tables["planes"])
    with pytest.raises(datasets.DatasetError, match="no ID field 'id'.*pass --key"):
        pt.partition(obj, 4, "id")
    with pytest.raises(datasets.DatasetError, match="not an integer"):
        pt.partition(obj, 4, "callsign")


def test_bad_dataset_names_and_sizes():
    with pytest.raises(datasets.DatasetError, match="choose from particles, planes, ships"):
        datasets.generate("boats")
    with pytest.raises(datasets.DatasetError, match="size must be"):
        datasets.generate("planes", 2 * datasets.MAX_BYTES)


def test_a_bitar_object_needs_a_device(tables, device):
    obj = pt.pack(tables["particles"], "bitar", device)
    with pytest.raises(pt.PartitionError, match="needs a Bitar device"):
        pt.unpack(obj)


def test_null_ids_and_corrupt_bitar_objects_are_clear_errors(device):
    t = pa.table({"id": pa.array([1, None, 3], pa.uint64()), "x": [1.0, 2.0, 3.0]})
    with pytest.raises(datasets.DatasetError, match="1 null values"):
        pt.partition(pt.pack(t), 2, "id")
    obj = bytearray(pt.pack(datasets.generate("planes", 300_000), "bitar", device))
    obj[-50] ^= 0xFF
    with pytest.raises(pt.PartitionError, match="corrupt Bitar frame"):
        pt.partition(bytes(obj), 2, "icao24", device=device)
