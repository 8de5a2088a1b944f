"""What the CLI and the demo show and send, shared by both (nothing here imports the CLI).

    chain_table(stages)           the per-stage breakdown of a chain call (measured)
    print_speedups(results, out)  the twin's speedup-vs-CPU table and its geomeans (modelled, mode named)
    deployment_body(fn)           the OpenFaaS FunctionDeployment sent for a stack file's function
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def chain_table(stages: list[dict]) -> Table:
    """The stages of a chain (the gateway's X-Nearfaas-Chain header, or an app run's "stages")."""
    from nearfaas.telemetry.headers import parse_timing

    from rich import box

    table = Table("stage", "node", "placement", "start", "stack/data/compute ms", "link read/write B", "output",
                  title="chain stages (measured on this machine)", box=box.SIMPLE)
    for st in stages:
        t = parse_timing(st["timing"])
        table.add_row(st["function"], st["node"], f"{st['target']};{st['reason']}", st["start"],
                      "/".join(f"{t.get(k, 0) * 1e3:.1f}" for k in ("stack", "data", "compute")),
                      f"{st['link']['read']:,}/{st['link']['write']:,}", st["output"])
    return table


# Column headers that fit 11 columns in 120: the app's distinguishing word.
SHORT = {"credit_risk": "credit", "asset_damage": "damage", "ppe_detection": "ppe", "clinical_analysis": "clinical",
         "content_moderation": "moderation", "chatbot": "chatbot", "translation": "translate", "remote_sensing": "sensing"}


def print_speedups(results: dict, out: Console) -> None:
    """The twin report's speedups, one row per platform and one column per app, then the
    geomean speedup, energy reduction and cost efficiency per platform; both titled with the
    mode they were computed in."""
    from nearfaas.twin.report import mode_caption, speedup_table, summary_table

    mode = mode_caption(results)
    what = "Xeon 8275CL baseline, p95 latency" if results.get("mode") == "paper" else "CPU stages measured on this machine"
    for title, rows in ((f"Speedup vs the CPU baseline (modelled, {mode}; {what})", speedup_table(results)),
                        (f"Geomeans vs the CPU baseline (modelled, {mode})", summary_table(results))):
        t = Table(title=title, title_justify="left")
        for i, c in enumerate(rows[0]):
            t.add_column(SHORT.get(c, c), justify="left" if i == 0 else "right", no_wrap=True)
        for r in rows[1:]:
            t.add_row(*r)
        out.print(t)


def deployment_body(fn) -> dict:
    """An OpenFaaS FunctionDeployment for a parsed FunctionSpec (plus nearfaas's own fields)."""
    from nearfaas.spec.bundle import pack

    d = fn.to_dict()
    body = {"service": fn.name, "lang": fn.lang, "envVars": fn.environment, "labels": fn.labels, "annotations": fn.annotations,
            "secrets": fn.secrets, "limits": fn.limits or None, "constraints": fn.constraints, "x-nearfaas": d.get("x"),
            **({"namespace": fn.namespace} if fn.namespace else {}), **({"requests": fn.requests} if fn.requests else {}),
            **({"envProcess": fn.fprocess} if fn.fprocess else {})}
    if fn.image_source:  # an image-only function (docs/images.md): the nodes read the image where it was resolved
        return body | {"image": fn.image_source}
    # The code travels with the deployment (spec/bundle.py): the gateway runs no path it is told.
    # A handler and an image both given: the handler runs, the image is echoed as deployed (faas-cli's way).
    return body | {"bundle": pack(fn.handler_dir), **({"image": fn.image} if fn.image else {})}
