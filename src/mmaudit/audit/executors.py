"""Executors run units of work, nothing else: here (local) or spread over a Ray cluster.

A :class:`Worker` holds one model and the plan's samples (wrong answers already
fixed) and runs a unit by name. The local executor keeps one worker per model
in this process; the Ray executor keeps actors that each load a model (one per
GPU when there are GPUs) and hands them units. Because the units and their
batches are the same, both give the same records. Units return their files as
bytes, so an actor writes nothing to disk; a unit whose worker dies is retried
on a restarted actor.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import torch

from mmaudit.audit.config import AuditConfig, make_attack
from mmaudit.audit.plan import AuditPlan, Unit, self_referenced
from mmaudit.audit.units import (
    EditCache,
    UnitResult,
    clean_unit,
    model_fields,
    model_settings,
    pixel_attack_unit,
    recovery_unit,
    sweep_unit,
    text_attack_unit,
    transfer_unit,
)
from mmaudit.data.sample import Sample
from mmaudit.errors import MMAuditError, UsageError
from mmaudit.judge.match import Judge
from mmaudit.pathways import registry


class Executor(Protocol):
    count: int  # how many models

    def meta(self, model: int) -> dict:
        """A model's name, level, fingerprint and where and how it runs (device, dtype, GPU, the adapter's
        settings), as the model record keeps them; its worker is started here if it was not."""
        ...

    def metas(self) -> list[dict]:
        """Every model's :meth:`meta` (their workers all started: for stages that need every model at once)."""
        ...

    def release(self, model: int) -> None:
        """The model's units are done: its worker may go (a Ray slot frees up for the next model)."""
        ...

    def run(self, model: int, units: Iterable[tuple[Unit, tuple]]) -> Iterator[UnitResult]:
        """Run (unit, extra arguments) pairs on a model, yielding results in order."""
        ...

    def close(self) -> None: ...


class OutOfMemory(RuntimeError):
    """Even one sample does not fit: the message says what to lower."""


def _halves(unit: Unit, extra: tuple) -> list[tuple[Unit, tuple]]:
    """A unit cut in two, with every extra argument that lists one item per sample cut alike."""
    n = len(unit.ids)
    cut = (n + 1) // 2
    out = []
    for a, b in ((0, cut), (cut, n)):
        part = Unit(unit.method, unit.ids[a:b], unit.keys[a:b], unit.attack,
                    unit.references[a:b] if unit.references is not None else None)
        out.append((part, tuple(e[a:b] if isinstance(e, (list, tuple)) and len(e) == n else e for e in extra)))
    return out


class Worker:
    """One model and the plan's samples; runs units and returns their records and files.

    A unit that runs out of accelerator memory is cut in half and each half run (recursively); the largest size
    that ran is remembered, so later units are cut before they fail. Results never depend on batch composition,
    so the records are those of the whole unit, each once.
    """

    def __init__(self, model, samples: list[Sample], cfg: AuditConfig, judge: Judge | None = None,
                 edits: EditCache | None = None) -> None:
        self.vlm, self.cfg, self.judge = model, cfg, judge or Judge()
        self.by_id = {s.id: s for s in samples}
        self.edits = edits or EditCache()
        self.cap: int | None = None  # the most samples a unit may hold here, once memory ran out
        self.splits = 0

    def meta(self) -> dict:
        return model_fields(self.vlm) | model_settings(self.vlm)

    def pid(self) -> int:
        return os.getpid()

    def run(self, unit: Unit, *extra) -> UnitResult:
        if self.cap is not None and len(unit.ids) > self.cap:
            return self._in_halves(unit, extra)
        try:
            return self._run(unit, *extra)
        except torch.OutOfMemoryError:
            pass  # leave the handler first: the traceback holds the failed batch's tensors
        free_memory()
        if len(unit.ids) == 1:
            raise OutOfMemory(f"{self.vlm.name}: one sample ({unit.ids[0]}) does not fit in memory for "
                              f"{unit.attack or unit.method}; lower --max-pixels (Qwen family), use --downscale or "
                              "--activation-checkpointing layers, or use a larger device")
        self.cap = min(self.cap or len(unit.ids), (len(unit.ids) + 1) // 2)  # the halves that come next
        self.splits += 1
        return self._in_halves(unit, extra)

    def _in_halves(self, unit: Unit, extra: tuple) -> UnitResult:
        return UnitResult.merge([self.run(u, *e) for u, e in _halves(unit, extra)])

    def _run(self, unit: Unit, *extra) -> UnitResult:
        chunk = [self.by_id[i] for i in unit.ids]
        if unit.references is not None:
            chunk = [self_referenced(s, ref) for s, ref in zip(chunk, unit.references)]
        keys = list(unit.keys)
        if unit.method == "clean":
            return clean_unit(self.vlm, chunk, keys, self.judge, self.cfg.reference)
        if unit.method == "recovery":
            (adversarial,) = extra
            return recovery_unit(self.vlm, chunk, adversarial, self.judge, self.cfg)
        if unit.method == "transfer":
            images, source, paths = extra
            return transfer_unit(self.vlm, chunk, keys, images, source, paths, self.judge)
        if unit.method == "sweep":
            (run,) = extra
            return sweep_unit(self.vlm, chunk, keys, self.judge, run)
        atk = make_attack(unit.attack, self.cfg, self.judge)
        params = extra[0]
        if registry.is_text(unit.attack):
            return text_attack_unit(self.vlm, atk, chunk, keys, self.edits, self.judge, self.cfg, params)
        return pixel_attack_unit(self.vlm, atk, chunk, keys, self.judge, self.cfg.verify_reload, params)


class LocalExecutor:
    """Models already loaded in this process; one edit cache shared by all of them."""

    def __init__(self, models, plan: AuditPlan, judge: Judge | None = None) -> None:
        edits = EditCache()
        self.workers = [Worker(m, plan.samples, plan.cfg, judge, edits) for m in models]
        self.count = len(self.workers)

    def meta(self, model: int) -> dict:
        return self.workers[model].meta()

    def metas(self) -> list[dict]:
        return [w.meta() for w in self.workers]

    def release(self, model: int) -> None:
        return None  # the caller's models stay loaded: they are the caller's

    def run(self, model: int, units: Iterable[tuple[Unit, tuple]]) -> Iterator[UnitResult]:
        for unit, extra in units:  # lazily: a unit's images are read when it is about to run
            yield self.workers[model].run(unit, *extra)

    def close(self) -> None:
        return None


class _RayWorker:
    """A Worker inside a Ray actor: it loads its model itself."""

    def __init__(self, spec: str, samples: list[Sample], cfg: AuditConfig, threads: int, placement=None,
                 modules: tuple[str, ...] = ()) -> None:
        from mmaudit import plugins
        from mmaudit.models.load import load_model

        plugins.use(*modules)  # the driver's --plugin modules (installed plugins are found by their entry points)
        torch.set_num_threads(threads)  # the driver's count: float sums then match a local run bit for bit
        self.worker = Worker(load_model(spec, placement), samples, cfg)  # the GPU Ray gave this actor is "cuda"

    def meta(self) -> dict:
        return self.worker.meta()

    def pid(self) -> int:
        return os.getpid()

    def call(self, unit: Unit, extra: tuple) -> UnitResult:
        return self.worker.run(unit, *extra)


class RayExecutor:
    """Units spread over Ray actors: ``workers`` actors per model, each holding its model, spread over the nodes.

    On a cluster with GPUs every actor takes one GPU (``num_gpus=1``); on CPUs it takes ``cpus_per_worker``. Models
    are queued: a model's actors are created when the driver reaches it (the next model's are asked for at the same
    time, so they load while this one runs wherever there is room, wait in Ray's queue where there is none, and give
    their room back if Ray placed them before the model the driver waits for) and
    killed once its units are done (:meth:`release`), so a cluster with room for one actor finishes any number of
    models. The executor schedules units itself, so a node (or a worker process) that dies costs only its units: a
    unit whose actor died goes back to the queue, the actor is replaced (Ray places the new one on any node with
    room), and the unit runs again, its records written once. An actor no node has room for (``place_timeout``),
    one that does not start (``start_timeout``: its model loading), a unit that fails ``retries`` times, or a head
    that stops answering (``head_timeout``) ends the run with a clear error instead of a hang: every finished unit
    is in the store, and a rerun resumes.
    """

    def __init__(self, specs: list[str], plan: AuditPlan, workers: int = 1, address: str | None = None,
                 cpus_per_worker: float = 1.0, retries: int = 3,
                 on_unit: Callable[[RayExecutor], None] | None = None, threads: int | None = None,
                 placement=None, start_timeout: float = 900.0, place_timeout: float = 60.0,
                 head_timeout: float = 20.0) -> None:
        address = address or os.environ.get("RAY_ADDRESS")
        ray = connect(address)
        # joining a cluster by address: say so when it is open (a local Ray started here listens on this machine)
        self.warning = OPEN_CLUSTER.format(address=address) if address and not head_authenticates(ray) else None
        gpus = ray.cluster_resources().get("GPU", 0)
        self.ray, self.on_unit, self.retries, self.workers = ray, on_unit, retries, workers
        self.start_timeout, self.place_timeout = start_timeout, place_timeout
        self.head = HeadWatch(gcs_address(ray), head_timeout)
        self.opts = ({"num_gpus": 1} if gpus else {"num_cpus": cpus_per_worker}) | {"scheduling_strategy": "SPREAD"}
        self._samples = ray.put(plan.samples)  # held for as long as the actors live: a replacement is built from it
        self.threads = threads or torch.get_num_threads()
        self.specs, self.cfg, self.placement = specs, plan.cfg, placement
        self.count = len(specs)
        self.cls = ray.remote(max_restarts=0, max_task_retries=0)(_RayWorker)
        self.actors: list[list] = [[] for _ in specs]  # a model's actors, from when it is reached to its release
        self.replaced = 0

    def _new(self, spec: str):
        from mmaudit import plugins

        return self.cls.options(**self.opts).remote(spec, self._samples, self.cfg, self.threads, self.placement,
                                                    tuple(plugins.used()))

    def _ask(self, model: int) -> None:
        """Ask Ray for a model's actors (once): they are placed when a node has room, and queue until then."""
        if 0 <= model < self.count and not self.actors[model]:
            self.actors[model] = [self._new(self.specs[model]) for _ in range(self.workers)]

    def _wait(self, refs: list, timeout: float) -> list:
        """``ray.wait`` for one of ``refs`` in short slices, so that a head that stopped answering ends the run."""
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=min(timeout, 2.0))
        self.head.check()
        return ready

    def _started(self, model: int, k: int):
        """The k-th actor of a model once it answers (replaced while it dies on the way). An actor no node has room
        for (still waiting to be placed after ``place_timeout`` seconds), or one that does not answer within
        ``start_timeout`` (its model still loading), ends the run with a clear error."""
        self._ask(model)
        self._ask(model + 1)  # the next model loads meanwhile where there is room
        for _ in range(self.retries + 1):
            actor, t0 = self.actors[model][k], time.monotonic()
            probe = actor.pid.remote()
            while True:
                ready = self._wait([probe], 5)
                waited = time.monotonic() - t0
                if not ready and waited > YIELD_AFTER and model + 1 < self.count and self.actors[model + 1] \
                        and unplaced(actor):
                    # Ray may have given the next model's actors the room this one waits for: this model first
                    self.release(model + 1)
                if ready or waited > self.start_timeout or (waited > self.place_timeout and unplaced(actor)):
                    break
            if not ready:
                why = "no node has room for it" if unplaced(actor) else "it did not answer"
                raise RayStalled(f"Ray: no worker for {self.specs[model]} after {waited:.0f} s ({why}; resources "
                                 f"free: {self.ray.available_resources()}): a node may have died with no room left "
                                 "for its actors. Finished units are in the store: rerun to resume, with more nodes "
                                 "or --executor local")
            try:
                self.ray.get(ready[0])
                self._ask(model + 1)  # asked again if it gave its room to this one
                return actor
            except self.ray.exceptions.RayActorError:
                pass  # died while starting: a new one
            self.actors[model][k] = self._new(self.specs[model])
            self.replaced += 1
        raise RayStalled(f"Ray: the workers for {self.specs[model]} keep dying on start; see the Ray logs")

    def meta(self, model: int) -> dict:
        return self.ray.get(self._started(model, 0).meta.remote())

    def metas(self) -> list[dict]:
        return [self.meta(m) for m in range(self.count)]

    def release(self, model: int) -> None:
        """Kill the model's actors: their slots (and their model's memory) go to the next model."""
        for a in self.actors[model]:
            self.ray.kill(a)
        self.actors[model] = []

    def run(self, model: int, units: Iterable[tuple[Unit, tuple]]) -> Iterator[UnitResult]:
        """Results in any order as they finish; a unit whose actor died runs again on a replacement."""
        from collections import deque

        queue = deque(units)
        self._ask(model)
        idle = deque(range(len(self.actors[model])))
        running: dict = {}  # object ref -> (unit, extra, actor index)
        failures: dict[int, int] = {}
        while queue or running:
            while queue and idle:
                k = idle.popleft()
                unit, extra = queue.popleft()
                running[self._started(model, k).call.remote(unit, extra)] = (unit, extra, k)
            ready = self._wait(list(running), 2.0)
            if not ready:
                continue
            unit, extra, k = running.pop(ready[0])
            try:
                result = self.ray.get(ready[0])
            except self.ray.exceptions.RayActorError as e:  # its worker or its node died: the unit goes back
                failures[id(unit)] = failures.get(id(unit), 0) + 1
                if failures[id(unit)] > self.retries:
                    raise RayStalled(f"Ray: unit {unit.method} {unit.attack or ''} of {self.specs[model]} failed "
                                     f"{failures[id(unit)]} times (last: {type(e).__name__}); finished units are in "
                                     "the store: rerun to resume") from None
                self.head.check()  # a unit lost with the head is not retried on a cluster that is gone
                self.actors[model][k] = self._new(self.specs[model])
                self.replaced += 1
                queue.appendleft((unit, extra))
                idle.append(k)
                continue
            idle.append(k)
            yield result
            if self.on_unit:
                self.on_unit(self)

    def close(self) -> None:
        """End the actors (their models' memory goes with them); with the head gone there is nothing to end, and
        the driver leaves the cluster without waiting on it."""
        if self.head.lost:
            self.head.stop()
            return
        for model in range(self.count):
            self.release(model)
        self.head.stop()


def gcs_address(ray) -> str | None:
    """host:port of the cluster's head (None through Ray Client, whose server watches the head itself)."""
    try:
        return ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001 - not every connection mode exposes it
        return None


class HeadWatch:
    """Whether the cluster's head (its GCS) still answers: a thread tries a TCP connection to it every second.

    Ray's own driver, with the head gone, waits a minute and then ends the whole process with its own message; the
    executor checks between waits and ends the run first, with mmaudit's error, once the head has not answered for
    ``timeout`` seconds."""

    def __init__(self, address: str | None, timeout: float) -> None:
        import threading

        self.timeout, self.lost = timeout, False
        self.last = time.monotonic()
        self._stop = threading.Event()
        host, _, port = (address or "").rpartition(":")
        self.address = (host, int(port)) if host and port.isdigit() else None
        if self.address:
            threading.Thread(target=self._watch, name="mmaudit-ray-head", daemon=True).start()

    def _watch(self) -> None:
        import socket

        while not self._stop.wait(1.0):
            try:
                socket.create_connection(self.address, timeout=1.0).close()
                self.last = time.monotonic()
            except OSError:
                pass

    def check(self) -> None:
        silent = time.monotonic() - self.last
        if self.address and silent > self.timeout:
            self.lost = True
            raise RayStalled(f"Ray: the cluster's head at {self.address[0]}:{self.address[1]} has not answered for "
                             f"{silent:.0f} s (it stopped or its node is gone). Finished units are in the store: "
                             "rerun to resume (on a new cluster, or with --executor local)")

    def stop(self) -> None:
        self._stop.set()


# seconds an actor waits for room before the next model's actors, asked for early, give theirs back
YIELD_AFTER = 10.0


def unplaced(actor) -> bool:
    """Whether Ray has not yet found a node for the actor; False when unknown. An actor whose ``__init__`` runs
    (its model loading, which takes minutes for a large checkpoint) is PENDING_CREATION too, but has a worker
    process: only one with none is waiting for room."""
    try:
        from ray._private.state import state

        info = state.actor_table(actor._actor_id.hex()) or {}
        return info.get("State") in ("PENDING_CREATION", "DEPENDENCIES_UNREADY") and not info.get("Pid")
    except Exception:  # noqa: BLE001 - a private table: without it the start timeout alone decides
        return False


class RayStalled(MMAuditError):
    """A Ray run that cannot go on (its workers cannot start, or a unit keeps failing): a clear end, not a hang."""


def connect(address: str | None):
    """Join the cluster at ``address`` (or start a local Ray) and return the ``ray`` module.

    Ray 2.60 authenticates a cluster only when its head was started with a token at hand (``~/.ray/auth_token``
    from ``ray get-auth-token --generate``, or ``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH``); a driver that joins
    by address sends the token only with ``RAY_AUTH_MODE=token``. So with the mode unset and a token at hand the
    driver turns it on (Ray reads the mode when it is first imported, hence the import here)."""
    if address and "RAY_AUTH_MODE" not in os.environ and token_at_hand() and "ray" not in sys.modules:
        os.environ["RAY_AUTH_MODE"] = "token"
    import ray

    if ray.is_initialized():
        return ray
    try:
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, ray.exceptions.AuthenticationError) as e:
        raise UsageError(f"--ray-address {address}: cannot join the Ray cluster ({' '.join(str(e).split())[:200]}); "
                         "start it with `ray start --head`, and check its address and the token (~/.ray/auth_token "
                         "or RAY_AUTH_TOKEN, with RAY_AUTH_MODE=token on every node)") from None
    return ray


def token_at_hand() -> bool:
    """Whether this machine holds a Ray token where Ray looks for one."""
    from pathlib import Path

    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token"
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or Path(path).expanduser().is_file()


OPEN_CLUSTER = ("Ray: the cluster at {address} does not authenticate (its head was started without a token): anyone "
                "who can reach its ports can run code on every node and read what the audit sends; see docs/audit.md, "
                "'A Ray cluster across machines'")


def head_authenticates(ray) -> bool:
    """Whether the cluster's head enforces token authentication (asked of a process on the head node, which
    inherits the mode the head was started with)."""

    @ray.remote(num_cpus=0, resources={"node:__internal_head__": 0.001})
    def mode() -> bool:
        from ray._raylet import AuthenticationMode, get_authentication_mode

        return get_authentication_mode() == AuthenticationMode.TOKEN

    return bool(ray.get(mode.remote(), timeout=120))


def free_memory() -> None:
    """Return what a failed unit held to the accelerator before the halves run."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
