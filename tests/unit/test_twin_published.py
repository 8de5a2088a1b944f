"""The device models beside published measurements (twin/published.py): every row names its
source, runs the twin's own model, and explains any gap over 30 %."""

from nearfaas.twin import published


def test_every_row_is_sourced_modelled_and_explained_where_far_off():
    rows = published.checks()
    devices = {r["device"].split(" (")[0] for r in rows}
    for need in ("TX2 GPU", "TX2 CPU", "RTX 2080 Ti", "V100", "T4", "Alveo U280", "SmartSSD"):
        assert need in devices, need  # every device the issue names has a row, found or not
    for r in rows:
        assert r["source"].strip() and "modelled" in r["label"]
        if r["gap"] is None:  # nothing published: said so in the source
            assert r["source"].startswith("none found"), r
            continue
        assert r["gap"] > -1
        if abs(r["gap"]) > published.EXPLAIN_OVER:
            assert r.get("explain", "").strip(), f"{r['device']} {r['network']}: gap {r['gap']:+.0%} with no explanation"
    md = published.table(rows)
    assert md.count("\n") == len(rows) + 1 and "| gap |" in md


def test_a_variant_device_changes_only_its_peaks():
    # The V100 row runs the 2080 Ti's form with the V100's figures: the catalog's own device is untouched.
    from nearfaas.twin import platforms

    before = platforms.device("gpu").specs["peak_ops"].value["fp32"]
    v100 = published._v100()
    assert v100.specs["peak_ops"].value["fp32"] == 15.7e12 and v100.efficiency is platforms.device("gpu").efficiency
    assert platforms.device("gpu").specs["peak_ops"].value["fp32"] == before
