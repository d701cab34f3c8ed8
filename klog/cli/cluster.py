"""``klog cluster up|status|down``: a local ZooKeeper and N brokers to try cluster mode.

Formatting only: starting, finding and stopping the processes, and asking the cluster for
its state, are klog.cluster_runner's (``LocalCluster``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from klog.cli import console
from klog.cli.topic import parse_pairs, print_table, table, text

cluster_app = console.command_group(
    "cluster", "Start, inspect and stop a local cluster (ZooKeeper + N brokers).")

DATA_DIR_HELP = ("Directory of the cluster's state file, ZooKeeper and broker data; default "
                 "$KLOG_CLUSTER_DIR or ~/.local/state/klog/cluster.")


def _data_dir_option() -> Any:
    return typer.Option(None, "--data-dir", "-d", help=DATA_DIR_HELP)


def _cluster(data_dir: Path | None) -> Any:
    from klog.cluster_runner import LocalCluster

    return LocalCluster(data_dir)


@cluster_app.command("up")
def up(
    brokers: int = typer.Option(3, "--brokers", "-n", min=1, max=64,
                                help="How many brokers (ids 1..N)."),
    data_dir: Path | None = _data_dir_option(),
    zookeeper_connect: str | None = typer.Option(
        None, "--zookeeper-connect", "-z",
        help="Use this ZooKeeper (HOST:PORT\\[/chroot]) instead of starting one."),
    override: list[str] = typer.Option(
        [], "--override", "-o", help="key=value broker config for every broker; repeatable."),
    timeout: float = typer.Option(60.0, "--timeout", min=1.0,
                                  help="Seconds to wait for the brokers to serve."),
) -> None:
    """Start ZooKeeper and N brokers on loopback ports; print the bootstrap servers once
    every broker serves."""
    from klog.cluster_runner import ClusterError

    overrides = parse_pairs(override, "--override")
    cluster = _cluster(data_dir)
    try:
        state = cluster.up(brokers, zookeeper_connect, overrides, timeout)
    except ClusterError as exc:
        console.fail(str(exc))
    console.info(f"cluster of {brokers} broker(s) up in {state.data_dir} "
                 f"(zookeeper {state.zookeeper_connect})")
    console.line(state.bootstrap_servers)


@cluster_app.command("status")
def status(
    data_dir: Path | None = _data_dir_option(),
    json_out: bool = typer.Option(False, "--json", help="Print JSON (one document)."),
) -> None:
    """Brokers, controller, under-replicated and offline partitions."""
    from klog.cluster_runner import ClusterError

    try:
        report = _cluster(data_dir).status()
    except ClusterError as exc:
        console.fail(str(exc))
    if json_out:
        console.emit_json(report)
    else:
        _print_status(report)
    running = [b for b in report["brokers"] if b["process"] != "stopped"]
    if not running:
        raise typer.Exit(console.EXIT_DAMAGE)


def _print_status(report: dict[str, Any]) -> None:
    zk = report["zookeeper"]
    zk_state = {True: "running", False: "stopped", None: "external"}[zk["running"]]
    console.line(f"cluster id: {report['cluster_id'] or '-'}")
    console.line(f"zookeeper: {zk['connect']} ({zk_state})")
    controller = report["controller"]
    console.line(f"controller: {controller if controller is not None else 'none'}")
    console.line(f"bootstrap servers: {report['bootstrap_servers']}")
    t = table("BROKER", "ADDRESS", "PID", "PROCESS", "REGISTERED", "ROLE")
    for b in report["brokers"]:
        t.add_row(text(b["id"]), text(f"{b['host']}:{b['port']}"), text(b["pid"]),
                  text(b["process"]), text("yes" if b["registered"] else "no"),
                  text("controller" if b["controller"] else "-"))
    print_table(t)
    for key, title in (("under_replicated_partitions", "under-replicated partitions"),
                       ("offline_partitions", "offline partitions")):
        rows = report[key]
        console.line(f"{title}: {len(rows)}")
        for r in rows:
            console.line(f"  {r['topic']}-{r['partition']} leader {r['leader']} "
                         f"replicas {r['replicas']} isr {r['isr']}")
    if report["error"]:
        console.warn(f"the cluster did not answer: {report['error']}")


@cluster_app.command("down")
def down(
    data_dir: Path | None = _data_dir_option(),
    purge: bool = typer.Option(False, "--purge",
                               help="Also delete the data directory (all topics)."),
    timeout: float = typer.Option(30.0, "--timeout", min=1.0,
                                  help="Seconds to wait after SIGTERM before SIGKILL."),
) -> None:
    """Stop the brokers (SIGTERM, then SIGKILL after --timeout) and ZooKeeper."""
    from klog.cluster_runner import ClusterError

    try:
        result = _cluster(data_dir).down(timeout=timeout, purge=purge)
    except ClusterError as exc:
        console.fail(str(exc))
    brokers = ", ".join(str(i) for i in result["stopped_brokers"]) or "none"
    console.info(f"stopped brokers {brokers}"
                 + (" and ZooKeeper" if result["zookeeper_stopped"] else "")
                 + (f"; killed {result['killed_pids']} after the timeout"
                    if result["killed_pids"] else "")
                 + ("; data deleted" if result["purged"] else ""))


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")
