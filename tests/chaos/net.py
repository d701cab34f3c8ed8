"""The chaos harness's network: one namespace per host on a bridge, and the faults on it.

Every host (a broker, a ZooKeeper node) runs in a network namespace of its own, with one
veth pair whose far end is plugged into a Linux bridge in the root namespace. The bridge
holds the address of the root namespace, where the harness and its clients run, so the
clients reach every host while nothing else can: the namespaces have no default route, and
the root namespace has a route to the harness's /24 only through its bridge.

Names and addresses come from a *slot*, claimed by creating /run/klog-chaos/slot-<n>
exclusively and writing our pid into it: namespaces ``kc<n>-<host>``, bridge ``kc<n>br``,
veths ``kc<n>-<host>`` (root side, renamed ``eth0`` inside), subnet 10.213.<n>.0/24 (the
bridge .1, hosts .11 upwards). Two runs never share a slot; a slot whose owner died (a
run killed with SIGKILL) is torn down by the next run that finds it, processes included.

Faults are nftables rules in a table ``inet klogchaos`` inside each host's namespace
(drop to / from addresses, or a random fraction with ``numgen random mod 100``), so they
apply to that host's own packets whatever route they take. Latency: ``tc qdisc netem``
when the kernel has it; otherwise (Firecracker's kernel lacks sch_netem) an iptables
NFQUEUE rule hands the host's outgoing packets to ``delayer.py``, which holds each one
for the delay before it accepts it (the packets really wait in the kernel's queue).

Everything made here is undone by ``Network.down()``, which runs on every exit path
(the harness calls it in ``finally``, from signal handlers and at exit); it kills every
process left in the namespaces first.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SLOT_DIR = Path("/run/klog-chaos")
SLOTS = 200
SUBNET_PREFIX = "10.213"
TABLE = "klogchaos"
DELAYER = Path(__file__).with_name("delayer.py")
#: The NFQUEUE number the delayer of a host listens on (one delayer per namespace).
QUEUE_NUM = 29


class NetworkError(RuntimeError):
    pass


def run(cmd: Sequence[str], check: bool = True, timeout: float = 30.0,
        input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure (with ``check``) raise NetworkError with its stderr."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout,
                          input=input_text, check=False)
    if check and proc.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)}: exit {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()}")
    return proc


def _has_cap_net_admin() -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) & (1 << 12))  # CAP_NET_ADMIN
    except OSError:
        pass
    return os.geteuid() == 0


def unavailable_reason() -> str | None:
    """Why the harness cannot make its network here, or None when it can: it needs
    CAP_NET_ADMIN (root), ``ip``, ``nft`` and ``iptables`` (scripts/setup-system.sh installs
    them), and a namespace that can actually be created."""
    if sys.platform != "linux":
        return f"network namespaces need Linux, not {sys.platform}"
    if not _has_cap_net_admin():
        return "network namespaces need root (CAP_NET_ADMIN); run the chaos suite as root"
    for tool in ("ip", "nft", "iptables"):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH (scripts/setup-system.sh installs it)"
    probe = f"kcprobe-{os.getpid()}"
    try:
        made = run(["ip", "netns", "add", probe], check=False)
        if made.returncode != 0:
            return f"cannot create a network namespace: {made.stderr.strip()}"
        nft = run(["ip", "netns", "exec", probe, "nft", "add", "table", "inet", TABLE],
                  check=False)
        if nft.returncode != 0:
            return f"nftables does not work in a namespace: {nft.stderr.strip()}"
    finally:
        run(["ip", "netns", "del", probe], check=False)
    return None


def netem_available() -> bool:
    """True when the kernel has sch_netem (a probe qdisc on a veth pair in a scratch
    namespace); Firecracker's kernels do not ("Specified qdisc kind is unknown")."""
    probe = f"kcnetem-{os.getpid()}"
    try:
        if run(["ip", "netns", "add", probe], check=False).returncode != 0:
            return False
        ok = run(["ip", "-n", probe, "link", "add", "a", "type", "veth", "peer", "name", "b"],
                 check=False).returncode == 0
        return ok and run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "a",
                           "root", "netem", "delay", "1ms"], check=False).returncode == 0
    finally:
        run(["ip", "netns", "del", probe], check=False)


# -- slots -------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
            return False
    return True


def _slot_path(slot: int) -> Path:
    return SLOT_DIR / f"slot-{slot}"


def _names_of(slot: int) -> tuple[list[str], list[str]]:
    """The namespaces and links that exist now with slot ``slot``'s prefix."""
    prefix = f"kc{slot}-"
    namespaces = [line.split()[0] for line in
                  run(["ip", "netns", "list"], check=False).stdout.splitlines()
                  if line.split() and line.split()[0].startswith(prefix)]
    links = []
    out = run(["ip", "-j", "link", "show"], check=False).stdout
    with contextlib.suppress(ValueError):
        for link in json.loads(out or "[]"):
            name = str(link.get("ifname", ""))
            if name.startswith(prefix) or name == f"kc{slot}br":
                links.append(name)
    return namespaces, links


def teardown_slot(slot: int) -> None:
    """Kill every process in the slot's namespaces, delete them, its links and its slot
    file. Safe to call on a slot that is partly or not at all set up."""
    namespaces, links = _names_of(slot)
    for ns in namespaces:
        kill_namespace_processes(ns)
    for ns in namespaces:
        run(["ip", "netns", "del", ns], check=False)
    for link in links:
        run(["ip", "link", "del", link], check=False)
    with contextlib.suppress(OSError):
        _slot_path(slot).unlink()


def kill_namespace_processes(ns: str) -> None:
    pids = run(["ip", "netns", "pids", ns], check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGCONT)
            os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _pid_alive(int(p))]
        time.sleep(0.05)


def claim_slot() -> int:
    """A free slot, claimed for this process; stale slots (owner dead) are torn down and
    reused. A slot whose subnet or names are in use by anything else is skipped."""
    SLOT_DIR.mkdir(parents=True, exist_ok=True)
    used_addresses = run(["ip", "-4", "-o", "addr"], check=False).stdout
    for slot in range(SLOTS):
        path = _slot_path(slot)
        if path.exists():
            try:
                owner = int(path.read_text().strip() or "0")
            except (OSError, ValueError):
                owner = 0
            if owner and _pid_alive(owner):
                continue
            teardown_slot(slot)  # its owner died without cleaning up
        if f" {SUBNET_PREFIX}.{slot}." in used_addresses:
            continue
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue  # another run got it first
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        namespaces, links = _names_of(slot)
        if namespaces or links:  # leftovers of a run that lost its slot file
            teardown_slot(slot)
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write(f"{os.getpid()}\n")
        return slot
    raise NetworkError(f"no free slot among {SLOTS} in {SLOT_DIR}")


# -- the network -----------------------------------------------------------------------------


@dataclass
class Host:
    name: str
    ns: str
    veth: str
    address: str


@dataclass
class Network:
    """Hosts in namespaces on one bridge (see the module docstring)."""

    host_names: list[str]
    slot: int = -1
    hosts: dict[str, Host] = field(default_factory=dict)
    netem: bool = False
    #: host -> the delayer process holding its packets (latency without netem).
    delayers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    log_dir: Path | None = None
    _up: bool = False

    @property
    def prefix(self) -> str:
        return f"kc{self.slot}"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def client_address(self) -> str:
        return f"{SUBNET_PREFIX}.{self.slot}.1"

    @property
    def subnet(self) -> str:
        return f"{SUBNET_PREFIX}.{self.slot}.0/24"

    def address(self, host: str) -> str:
        return self.hosts[host].address

    def exec_prefix(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[host].ns]

    def up(self) -> Network:
        self.slot = claim_slot()
        self._up = True
        self.netem = netem_available()
        run(["ip", "link", "add", self.bridge, "type", "bridge"])
        run(["ip", "addr", "add", f"{self.client_address}/24", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])
        for i, name in enumerate(self.host_names):
            host = Host(name, f"{self.prefix}-{name}", f"{self.prefix}-{name}",
                        f"{SUBNET_PREFIX}.{self.slot}.{11 + i}")
            self.hosts[name] = host
            peer = f"{self.prefix}p{i}"
            run(["ip", "netns", "add", host.ns])
            run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", peer])
            run(["ip", "link", "set", peer, "netns", host.ns])
            run(["ip", "link", "set", host.veth, "master", self.bridge])
            run(["ip", "link", "set", host.veth, "up"])
            run(["ip", "-n", host.ns, "link", "set", peer, "name", "eth0"])
            run(["ip", "-n", host.ns, "addr", "add", f"{host.address}/24", "dev", "eth0"])
            run(["ip", "-n", host.ns, "link", "set", "eth0", "up"])
            run(["ip", "-n", host.ns, "link", "set", "lo", "up"])
            self._nft(name, f"add table inet {TABLE}\n"
                      f"add chain inet {TABLE} input {{ type filter hook input priority 0; }}\n"
                      f"add chain inet {TABLE} output "
                      f"{{ type filter hook output priority 0; }}\n")
        return self

    def down(self) -> None:
        """Undo everything (idempotent): delayers, processes, namespaces, links, slot."""
        if not self._up:
            return
        for proc in self.delayers.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        self.delayers.clear()
        teardown_slot(self.slot)
        self._up = False

    # -- faults

    def _nft(self, host: str, script: str) -> None:
        run([*self.exec_prefix(host), "nft", "-f", "-"], input_text=script)

    def drop(self, host: str, peers: Iterable[str], direction: str = "both",
             percent: int = 100) -> None:
        """Drop ``percent`` % of ``host``'s packets to (``out``), from (``in``) or both
        ways with the addresses of ``peers`` (host names, or "client" for the root
        namespace, or "all" for the whole subnet)."""
        addresses = sorted(self._addresses(peers))
        if not addresses:
            return
        aset = "{ " + ", ".join(addresses) + " }"
        verdict = "drop" if percent >= 100 else f"numgen random mod 100 < {percent} drop"
        lines = []
        if direction in ("out", "both"):
            lines.append(f"add rule inet {TABLE} output ip daddr {aset} {verdict}")
        if direction in ("in", "both"):
            lines.append(f"add rule inet {TABLE} input ip saddr {aset} {verdict}")
        self._nft(host, "\n".join(lines) + "\n")

    def _addresses(self, peers: Iterable[str]) -> set[str]:
        out = set()
        for p in peers:
            if p == "client":
                out.add(self.client_address)
            elif p == "all":
                out.add(self.subnet)
            else:
                out.add(self.hosts[p].address)
        return out

    def partition(self, groups: Sequence[Sequence[str]]) -> None:
        """No host of one group exchanges a packet with a host of another."""
        for i, group in enumerate(groups):
            others = [h for j, g in enumerate(groups) if j != i for h in g]
            for host in group:
                self.drop(host, others)

    def delay(self, host: str, delay_ms: int, jitter_ms: int, loss_percent: int,
              seed: int) -> str:
        """Packets leaving ``host`` wait ``delay_ms`` +- ``jitter_ms`` and
        ``loss_percent`` % of them are lost; returns the means ("netem" or "nfqueue")."""
        ns = self.hosts[host].ns
        if self.netem:
            cmd = ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem",
                   "delay", f"{delay_ms}ms", f"{jitter_ms}ms"]
            if loss_percent:
                cmd += ["loss", f"{loss_percent}%"]
            run(self.exec_prefix(host) + cmd)
            return "netem"
        log = open(self._log_path(f"delayer-{host}.log"), "ab")  # noqa: SIM115 - the child's
        proc = subprocess.Popen(
            [*self.exec_prefix(host), sys.executable, str(DELAYER),
             "--queue", str(QUEUE_NUM), "--delay-ms", str(delay_ms),
             "--jitter-ms", str(jitter_ms), "--loss", str(loss_percent), "--seed", str(seed)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        self.delayers[host] = proc
        # The delayer binds its queue before it says "ready"; until then --queue-bypass
        # lets packets through undelayed rather than dropping them.
        deadline = time.monotonic() + 10
        path = self._log_path(f"delayer-{host}.log")
        while time.monotonic() < deadline and b"ready" not in path.read_bytes():
            if proc.poll() is not None:
                raise NetworkError(f"the delayer of {host} exited: {path.read_text()}")
            time.sleep(0.02)
        run(["ip", "netns", "exec", ns, "iptables", "-w", "-A", "OUTPUT", "-o", "eth0",
             "-j", "NFQUEUE", "--queue-num", str(QUEUE_NUM), "--queue-bypass"])
        return "nfqueue"

    def _log_path(self, name: str) -> Path:
        base = self.log_dir or Path("/tmp")
        path = base / name
        path.touch()
        return path

    def heal(self) -> None:
        """Remove every fault: nft rules, the NFQUEUE rules and their delayers, netem."""
        for name, host in self.hosts.items():
            self._nft(name, f"flush chain inet {TABLE} input\n"
                      f"flush chain inet {TABLE} output\n")
            if name in self.delayers:
                run(["ip", "netns", "exec", host.ns, "iptables", "-w", "-F", "OUTPUT"],
                    check=False)
                proc = self.delayers.pop(name)
                proc.terminate()  # it lets every held packet go, then exits
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if self.netem:
                run([*self.exec_prefix(name), "tc", "qdisc", "del", "dev", "eth0", "root"],
                    check=False)
