#!/usr/bin/env python3
"""One host's part of a multi-node launch, run by run_head.sh and run_worker.sh (beside this file).

  address IFACE     print IFACE's IPv4 address (what Ray, torch.distributed and NCCL advertise)
  head ...          start the Ray head, wait until every host and GPU has joined, run the server,
                    and stop it when a host stays out of the cluster for --lost-timeout seconds
  worker ...        wait for the head's Ray port, join the cluster, and stay until Ray ends

Exit status: the server's own when it ends; 75 when a host is missing (it never joined, or it
left), so a restart policy starts the group again; 2 for bad input.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time

#: EX_TEMPFAIL: a host of the group is missing; starting again may succeed.
EXIT_NODE_MISSING = 75
POLL_S = 1.0
PROGRESS_S = 10.0
#: After SIGTERM the server drains (its --shutdown-timeout), then it is killed.
STOP_GRACE_S = 20.0
_SIOCGIFADDR = 0x8915


def say(message: str) -> None:
    print(f"qfn_cluster: {message}", file=sys.stderr, flush=True)


def interface_address(iface: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", iface.encode()[:15]))
        except OSError as exc:
            raise SystemExit(
                f"qfn_cluster: interface {iface!r} has no IPv4 address here ({exc.strerror}): set cluster.interface "
                "in the target file to the link between the hosts (`ip -br addr` lists interfaces), or NODE_IP to "
                "this host's address on it"
            ) from None
    return socket.inet_ntoa(packed[20:24])


class Stop:
    """Stop signals, remembered and passed to whatever child runs."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.child: subprocess.Popen | None = None
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signal = signum
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)


def ray_stop() -> None:
    """This host's Ray daemons go with its role, so a restart starts from a clean node."""
    subprocess.run(["ray", "stop", "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def stop_child(child: subprocess.Popen, signum: int = signal.SIGTERM) -> int:
    if child.poll() is None:
        child.send_signal(signum)
        try:
            return child.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            say(f"the server did not stop within {STOP_GRACE_S:g} s of {signal.Signals(signum).name}; killing it")
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return child.wait()


def health_check_env(lost_timeout: int) -> dict[str, str]:
    """Ray system settings (RAY_<name>) for a health check every second that gives up after lost_timeout misses."""
    return {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
            "RAY_health_check_failure_threshold": str(max(lost_timeout, 1))}


def alive_nodes(ray) -> list[dict]:
    return [n for n in ray.nodes() if n.get("Alive")]


def describe(nodes: list[dict]) -> str:
    return ", ".join(sorted(n.get("NodeManagerAddress", "?") for n in nodes)) or "none"


def head(args: argparse.Namespace, stop: Stop) -> int:
    address = f"{args.node_ip}:{args.ray_port}"
    start = ["ray", "start", "--head", f"--node-ip-address={args.node_ip}", f"--port={args.ray_port}", *shlex.split(args.ray_args)]
    say("starting the Ray head: " + shlex.join(start))
    # Ray's control plane marks a host dead after about --lost-timeout seconds of missed health checks
    # (its default is longer), which bounds how long a lost host goes unnoticed.
    ray_env = {**os.environ, **health_check_env(args.lost_timeout)}
    if subprocess.run(start, env=ray_env, check=False).returncode != 0:
        say("`ray start --head` failed (output above)")
        ray_stop()
        return EXIT_NODE_MISSING
    import ray

    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        want_gpus = args.nodes * args.gpus
        began = last = time.monotonic()
        while True:
            if stop.signal is not None:
                return 0
            nodes = alive_nodes(ray)
            gpus = sum(n.get("Resources", {}).get("GPU", 0) for n in nodes)
            if len(nodes) >= args.nodes and gpus >= want_gpus:
                say(f"{len(nodes)} hosts and {gpus:g} GPUs in the cluster ({describe(nodes)}) after "
                    f"{time.monotonic() - began:.0f} s; starting the server")
                break
            waited = time.monotonic() - began
            if waited > args.join_timeout:
                say(f"only {len(nodes)} of {args.nodes} hosts ({describe(nodes)}) and {gpus:g} of {want_gpus} GPUs "
                    f"joined within {args.join_timeout} s. Start run_worker.sh on every other host with "
                    f"HEAD_ADDRESS={args.node_ip} (docker run ... IMAGE worker), and check that they reach "
                    f"{address} and the ports launch/ENV.md lists")
                return EXIT_NODE_MISSING
            if time.monotonic() - last >= PROGRESS_S:
                last = time.monotonic()
                say(f"waiting for hosts: {len(nodes)} of {args.nodes} joined ({describe(nodes)}), {waited:.0f} s "
                    f"of {args.join_timeout} s")
            time.sleep(POLL_S)

        # The engine's own ray.init() joins this cluster, not a new local one.
        env = {**os.environ, "RAY_ADDRESS": address}
        # The engine placed its workers on these hosts: losing any of them loses part of the model, even
        # when the host comes back (as a new Ray node, with nothing loaded).
        members = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in nodes}
        stop.child = child = subprocess.Popen(args.server, env=env, start_new_session=True)
        while (rc := child.poll()) is None:
            if stop.signal is not None:
                return stop_child(child, stop.signal)
            try:
                alive = {n["NodeID"] for n in alive_nodes(ray)}
            except Exception as exc:  # the GCS itself is gone: the cluster cannot serve
                say(f"cannot read the cluster's hosts ({exc}); stopping the server")
                stop_child(child)
                return EXIT_NODE_MISSING
            if lost := sorted(addr for node, addr in members.items() if node not in alive):
                say(f"host(s) {', '.join(lost)} left the cluster (Ray marked them dead); stopping the server so the "
                    "group can restart")
                stop_child(child)
                return EXIT_NODE_MISSING
            time.sleep(POLL_S)
        return rc
    finally:
        # Disconnect first: a driver whose raylet is stopped under it exits with status 1 on its own,
        # racing the status this returns.
        ray.shutdown()
        ray_stop()


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def worker(args: argparse.Namespace, stop: Stop) -> int:
    host, _, port = args.head.rpartition(":")
    began = last = time.monotonic()
    while not reachable(host, int(port)):
        if stop.signal is not None:
            return 0
        waited = time.monotonic() - began
        if waited > args.join_timeout:
            say(f"the head's Ray port {args.head} did not answer within {args.join_timeout} s: start run_head.sh "
                "there first, and check HEAD_ADDRESS and the ports launch/ENV.md lists")
            return EXIT_NODE_MISSING
        if time.monotonic() - last >= PROGRESS_S:
            last = time.monotonic()
            say(f"waiting for the head at {args.head}: {waited:.0f} s of {args.join_timeout} s")
        time.sleep(POLL_S)
    env = dict(os.environ)
    # A worker whose head is gone exits after this long instead of Ray's default minute.
    env.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(args.lost_timeout))
    start = ["ray", "start", f"--address={args.head}", f"--node-ip-address={args.node_ip}", "--block",
             *shlex.split(args.ray_args)]
    say("joining the cluster: " + shlex.join(start))
    stop.child = child = subprocess.Popen(start, env=env, start_new_session=True)
    try:
        rc = child.wait()
        if stop.signal is None:
            say(f"Ray on this host ended (status {rc}): the head is gone or this host was dropped")
            return rc or EXIT_NODE_MISSING
        return 0
    finally:
        ray_stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="qfn_cluster.py")
    sub = parser.add_subparsers(dest="role", required=True)
    addr = sub.add_parser("address")
    addr.add_argument("interface")
    for role in ("head", "worker"):
        p = sub.add_parser(role)
        p.add_argument("--node-ip", required=True)
        p.add_argument("--join-timeout", type=int, required=True)
        p.add_argument("--lost-timeout", type=int, required=True)
        p.add_argument("--ray-args", default="", help="`ray start` flags, one shell-quoted string")
        if role == "head":
            p.add_argument("--nodes", type=int, required=True)
            p.add_argument("--gpus", type=int, required=True, help="GPUs per host")
            p.add_argument("--ray-port", type=int, required=True)
            p.add_argument("server", nargs=argparse.REMAINDER, help="-- then the server command")
        else:
            p.add_argument("--head", required=True, help="HOST:PORT of the head's Ray GCS")
    args = parser.parse_args(argv)
    if args.role == "address":
        print(interface_address(args.interface))
        return 0
    stop = Stop()
    if args.role == "head":
        args.server = args.server[1:] if args.server[:1] == ["--"] else args.server
        if not args.server:
            parser.error("head needs the server command after --")
        return head(args, stop)
    if ":" not in args.head or not args.head.rpartition(":")[2].isdigit():
        parser.error(f"--head {args.head!r} is not HOST:PORT")
    return worker(args, stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
