"""Rack-scale discrete-event simulation of nearfaas, every placement made by the live policy
objects (``nearfaas.placement.policy``). See docs/twin-sim.md."""

from nearfaas.twin.sim.engine import App, Function, SimConfig, SimResult, Simulator, dscs_apps, simulate
from nearfaas.twin.sim.workload import (
    APP_KEYS,
    WorkloadError,
    app_for_function,
    azure_replay,
    poisson,
    read_azure_durations,
    read_azure_invocations,
)

__all__ = ["APP_KEYS", "App", "Function", "SimConfig", "SimResult", "Simulator", "WorkloadError", "app_for_function",
           "azure_replay", "dscs_apps", "poisson", "read_azure_durations", "read_azure_invocations", "simulate"]
