"""``memq worker embed|consolidate|tasks|webhooks [--burst]``: run RQ workers for memq's queues."""

from __future__ import annotations

import argparse
import logging
import uuid
from typing import Any

from memq import broker, logs, names
from memq.authority import Role
from memq.cli.common import add_store_options, load_config

KINDS = {
    "embed": names.QUEUE_EMBED,
    "consolidate": names.QUEUE_CONSOLIDATE,
    "tasks": names.QUEUE_TASKS,
    "webhooks": names.QUEUE_WEBHOOKS,
}


def register(sub: Any) -> None:
    parser = sub.add_parser("worker", help="run a worker for one of memq's queues")
    parser.add_argument("kind", choices=sorted(KINDS), help="which queue to serve")
    parser.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    parser.add_argument("--name", help="worker name shown in rq-dashboard")
    add_store_options(parser)
    parser.set_defaults(func=run_worker)


def run_worker(args: argparse.Namespace) -> int:
    from memq.model_files import verify
    from memq.workers import context
    from memq.workers.queues import worker

    logs.setup()
    config = load_config(args, role=Role.WORKER)
    if args.kind == "embed" or (args.kind == "consolidate" and not config.llm.base_url):
        # Both embed (the extractive summariser too): without the files every job would
        # fail, one after another, long after this start.
        verify(config.embed.model_dir)
    # Every connection, reconnections included, carries the worker's name: the writer's
    # reconcile pass judges a started job's worker alive by it (see store/embed_jobs.py).
    name = args.name or uuid.uuid4().hex
    connection = broker.client_for(config, client_name=name)
    context.install(context.WorkerContext(config, connection))
    logs.log(logging.getLogger("memq.worker"), "worker ready", queue=KINDS[args.kind],
             name=name)
    with broker.translated(config.redis_url, f"running the {args.kind} worker"):
        worker([KINDS[args.kind]], connection, name=name).work(
            burst=args.burst, with_scheduler=False
        )
    return 0
