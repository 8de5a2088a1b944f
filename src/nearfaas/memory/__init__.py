"""Memory tiers for functions (issue 18, Porter): which allocations of a function are hot, kept
on the fast tier on later calls. ``shim`` reads the LD_PRELOAD allocation log
(native/memshim/memshim.c). docs/memory.md says what is built and what this machine allows."""
