"""The one nearfaas command line.

    nearfaas up                      start a local cluster (gateway + storage + compute nodes)
    nearfaas deploy -f stack.yml     deploy the functions of an OpenFaaS stack file
    nearfaas put ./cat.jpg s3://photos/cat.jpg
    nearfaas invoke resize --input s3://photos/cat.jpg
    nearfaas down                    stop everything, leave no process behind

One module per command group: cluster (up, down, status, credentials, accelerator), functions
(deploy, remove, list, invoke, logs), objects (put, get, ls), query, secret, bench, demo, and the ones
loaded only when used: apps, models, hw, twin, dataservices, memory, bitar, partition, sift, econ, keys. common holds what they share; the tables and
bodies the demo shows and sends too live in nearfaas.present, below the CLI.
"""

from __future__ import annotations

import importlib

import click


class _LazyGroup(click.Group):
    """Subcommand groups whose modules import heavy libraries load only when used: `nearfaas up`
    need not import ONNX for `nearfaas hw`."""

    lazy = {"apps": "nearfaas.cli.apps:apps", "models": "nearfaas.cli.models:models", "hw": "nearfaas.cli.hw:hw",
            "twin": "nearfaas.cli.twin:twin", "dataservices": "nearfaas.cli.dataservices:dataservices",
            "memory": "nearfaas.cli.memory:memory", "bitar": "nearfaas.cli.bitar:bitar",
            "partition": "nearfaas.cli.partition:partition", "sift": "nearfaas.cli.sift:sift",
            "econ": "nearfaas.cli.econ:econ", "keys": "nearfaas.cli.keys:keys"}

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        if name in self.lazy and name not in self.commands:
            module, attr = self.lazy[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="nearfaas")
def main() -> None:
    """nearfaas: a serverless platform that runs each function where its data lives.

    \b
    Quick start:
      nearfaas up                                  # gateway + 2 storage nodes + 1 compute node
      nearfaas deploy -f examples/stack.yml        # OpenFaaS stack file, Python handlers
      nearfaas put photo.jpg s3://photos/cat.jpg   # any S3 client works: boto3, aws-cli
      nearfaas invoke wordcount --input s3://photos/cat.jpg
      nearfaas status                              # nodes, functions, replicas
      nearfaas down

    The gateway speaks the OpenFaaS REST API (/system/*, /function/<name>) and the S3 API on the
    same port. Every number it reports is measured on this machine unless labelled modelled.
    """


def _add_eager_commands() -> None:
    from nearfaas.cli import bench, cluster, demo, functions, objects, query, secret

    for module in (cluster, functions, objects, query, secret, bench, demo):
        for command in module.COMMANDS:
            main.add_command(command)


_add_eager_commands()
