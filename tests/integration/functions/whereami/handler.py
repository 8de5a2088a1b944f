"""Reports what a worker's process looks like from inside: the pre-warmed path must match a spawned one."""

import os
import sys


def handle(event, context):
    print(f"whereami called in {os.getcwd()}")
    return {"cwd": os.getcwd(), "pid": os.getpid(), "greeting": os.environ.get("GREETING"),
            "function": os.environ.get("NEARFAAS_FUNCTION"), "node": os.environ.get("NEARFAAS_NODE"),
            "node_url": os.environ.get("NEARFAAS_NODE_URL"), "sys_path_0": sys.path[0],
            "hash_randomization": sys.flags.hash_randomization, "stdin_is_devnull": os.path.samestat(
                os.fstat(0), os.stat(os.devnull))}
