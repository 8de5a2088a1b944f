"""The gateway starts without the query engine, and loads it on the first select or query."""

from __future__ import annotations

import subprocess
import sys

ENGINE = ("pyarrow", "sqlglot", "nearfaas.dataservices.sql", "nearfaas.dataservices.select")


def test_importing_the_gateway_leaves_the_query_engine_unloaded():
    """A second of the gateway's start-up was pyarrow and sqlglot, which only selects and queries
    use; every cluster start and gateway restart paid it."""
    code = f"import sys, nearfaas.gateway.app; print(','.join(m for m in {ENGINE!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "", f"imported at the gateway's start: {out.stdout.strip()}"


def test_load_engine_imports_it_off_the_event_loop():
    code = ("import asyncio, sys, threading\n"
            "from nearfaas.gateway import select_planner as sp\n"
            "seen = []\n"
            "real = sp.importlib.import_module\n"
            "sp.importlib.import_module = lambda name: (seen.append(threading.current_thread() is threading.main_thread()), real(name))[1]\n"
            "asyncio.run(sp.load_engine())\n"
            "print(all(m in sys.modules for m in (*sp._ENGINE, 'sqlglot')), any(seen))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["True", "False"], out  # loaded, and never on the loop's (main) thread
