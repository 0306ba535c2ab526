"""Joining a Ray cluster for `cuda-agent batch --ray`. Ray is imported here and in the batch's Ray
runner only, lazily: it is optional (the `distributed` extra) and slow to import.

`auto` is Ray's own `ray.init()` rule: RAY_ADDRESS if set, else the cluster `ray start` started on
this machine, else a local Ray instance for this batch alone (this machine's CPUs and GPUs),
stopped when the batch ends. An ADDRESS (host:port of the head, or ray://host:port) must answer.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from cuda_agent import install_hint

CONNECT_TIMEOUT_S = 5.0
# A Ray this batch starts for itself runs without metrics: nobody reads them, and Ray 2.60's raylet
# segfaults now and then in its OpenTelemetry exporter thread right after start (seen in CI: the
# batch then dies with "raylet ... is dead"). Set before ray.init so the raylet and workers inherit them.
LOCAL_RAY_ENV = {"RAY_enable_metrics_collection": "0", "RAY_enable_open_telemetry": "0"}


class RayError(RuntimeError):
    """Ray missing or the cluster unreachable; the message says what to do."""


def import_ray():
    try:
        import ray
    except ImportError:
        raise RayError(f"--ray needs ray, which is not installed: {install_hint('distributed')}") from None
    return ray


def recorded_cluster() -> str | None:
    """The head `ray start` recorded on this machine (Ray's own file), which `auto` joins. A head that
    died without `ray stop` leaves it behind, and ray.init then waits on it for minutes."""
    try:
        return (Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster").read_text().strip() or None
    except OSError:
        return None


def check_reachable(address: str, recorded: bool = False) -> None:
    """Fail fast: ray.init retries an unreachable head for minutes before it gives up."""
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or not port:
        raise RayError(
            f"--ray {address}: give the head's HOST:PORT (e.g. 10.0.0.1:6379, as `ray start --head` "
            "printed it), ray://HOST:PORT, or auto"
        )
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        if recorded:
            raise RayError(
                f"--ray auto: the Ray head this machine last started ({address}, in "
                f"{tempfile.gettempdir()}/ray/ray_current_cluster) does not answer ({e}): run `ray stop` "
                "to forget it (auto then starts a Ray of its own), or give --ray HOST:PORT"
            ) from None
        raise RayError(
            f"no Ray cluster answers at {address} ({e}): start one there with `ray start --head`, "
            "or check the address and that this machine can reach it"
        ) from None


def check_address(address: str) -> None:
    """What `connect` would first fail on, without joining: an ADDRESS (or RAY_ADDRESS under auto)
    that does not answer."""
    if address != "auto":
        check_reachable(address)
    elif os.environ.get("RAY_ADDRESS"):
        check_reachable(os.environ["RAY_ADDRESS"])
    elif recorded_cluster():
        check_reachable(recorded_cluster(), recorded=True)


def connect(address: str) -> dict[str, float]:
    """Join the cluster (see the module doc); its total resources ({"CPU": 8.0, "GPU": 2.0, ...})."""
    ray = import_ray()
    target = None if address == "auto" else address
    check_address(address)
    if address == "auto" and not os.environ.get("RAY_ADDRESS") and not recorded_cluster():
        for key, value in LOCAL_RAY_ENV.items():
            os.environ.setdefault(key, value)
    if not ray.is_initialized():
        try:
            ray.init(address=target, log_to_driver=False, include_dashboard=False, configure_logging=False)
        except (ConnectionError, RuntimeError) as e:
            auth = (
                ""
                if os.environ.get("RAY_AUTH_MODE")
                else (
                    "; if the cluster uses token authentication (`ray start --head` turns it on since Ray 2.59), set "
                    "RAY_AUTH_MODE=token here too, with the cluster's token in RAY_AUTH_TOKEN or ~/.ray/auth_token"
                )
            )
            raise RayError(f"could not join the Ray cluster at {address}: {str(e).splitlines()[0]}{auth}") from None
    return ray.cluster_resources()


def disconnect() -> None:
    ray = import_ray()
    if ray.is_initialized():
        ray.shutdown()


def capacity(resources: dict[str, float], device: str, slots_per_device: int) -> int:
    """Tasks the cluster runs at once: its GPUs x `slots_per_device` (each task takes that share of
    a GPU, raypool.py) and one CPU each; its CPUs for host-only (`--device cpu`) batches."""
    cpus = max(1, int(resources.get("CPU", 1)))
    if device == "cpu":
        return cpus
    gpus = resources.get("GPU", 0)
    if gpus < 1:
        raise RayError(
            "the Ray cluster has no GPUs: start each node with `ray start ... --num-gpus N` (N = the GPUs "
            "it has), or run host-only kernels with --device cpu"
        )
    return max(1, min(cpus, int(gpus * slots_per_device)))
