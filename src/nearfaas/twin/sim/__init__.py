"""Rack-scale discrete-event simulation of nearfaas, every placement made by the live policy
objects (``nearfaas.placement.policy``). See docs/twin-sim.md."""

from nearfaas.twin.sim.azure import (
    AzureTrace,
    Percentiles,
    app_for_function,
    azure_replay,
    load_azure_trace,
    read_azure_durations,
    read_azure_invocations,
    read_azure_memory,
)
from nearfaas.twin.sim.engine import App, Function, SimConfig, SimResult, Simulator, dscs_apps, simulate
from nearfaas.twin.sim.workload import APP_KEYS, WorkloadError, poisson

__all__ = ["APP_KEYS", "App", "AzureTrace", "Function", "Percentiles", "SimConfig", "SimResult", "Simulator", "WorkloadError",
           "app_for_function", "azure_replay", "dscs_apps", "load_azure_trace", "poisson", "read_azure_durations",
           "read_azure_invocations", "read_azure_memory", "simulate"]
