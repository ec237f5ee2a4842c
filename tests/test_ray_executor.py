"""`--executor ray`: the same records as the local executor, even when a worker process is killed mid-run."""

import os
import signal

import pytest

from mmaudit.audit import AuditConfig, run_audit
from mmaudit.data.synthetic import FAMILIES, synthetic_set
from mmaudit.models.zoo.adapter import load_zoo


@pytest.fixture(scope="module")
def ray(tmp_path_factory):
    """A local Ray (Ray makes its token for it in ~/.ray: here in a home folder of the test's own, so that no test
    leaves one behind that a later cluster would need)."""
    ray = pytest.importorskip("ray")
    home = os.environ.get("HOME")
    os.environ["HOME"] = str(tmp_path_factory.mktemp("home"))
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        yield ray
    finally:
        ray.shutdown()
        os.environ.pop("RAY_AUTH_MODE", None)  # ray.init turned it on for this process
        if home is not None:
            os.environ["HOME"] = home


def records(store):
    return {r["key"]: r for r in store.records()}


def actor_info(actor) -> dict:
    """Ray's actor-table entry for ``actor`` (empty until the GCS has registered it). A wait must not end on
    ``unplaced`` answering False: it does when it cannot tell, and just after ``.remote()`` it answered False, then
    True, for 2 of 5 fresh actors on a free local Ray."""
    from ray._private.state import state

    return state.actor_table(actor._actor_id.hex()) or {}


def wait_for_worker(actor, seconds: float = 60) -> bool:
    """Whether the actor got a worker process (Ray placed it) within ``seconds`` (a worker process can take tens
    of seconds to start on a busy 2-core machine)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not actor_info(actor).get("Pid"):
        time.sleep(0.5)
    return bool(actor_info(actor).get("Pid"))


def test_ray_matches_local_and_survives_a_killed_worker(tmp_path, ray):
    import tempfile
    from pathlib import Path

    from mmaudit.audit import AuditPlan, RayExecutor, drive

    before = set(Path(tempfile.gettempdir()).glob("mmaudit*"))
    samples = synthetic_set(4, seed=10_000, families=FAMILIES)
    cfg = AuditConfig(attacks=["end_pgd", "mantis", "typo_evid"], steps=4, batch=4, recovery=6, ocr_limit=0)
    local = run_audit([load_zoo("L1")], samples, tmp_path / "local", cfg)

    killed: list[int] = []

    def kill_one_worker_once(ex):
        if not killed:
            pid = ray.get(ex.actors[0][0].pid.remote())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    plan = AuditPlan.build(samples, cfg)
    ex = RayExecutor(["zoo:L1"], plan, workers=2, on_unit=kill_one_worker_once)
    remote = drive(ex, plan, tmp_path / "ray")
    assert killed, "the fault was never injected"
    a, b = records(local), records(remote)
    assert a.keys() == b.keys() and a == b
    assert any(r["kind"] == "recovery" for r in b.values())
    for r in b.values():  # every image a record names reached the driver's run folder
        if r.get("image"):
            assert (tmp_path / "ray" / r["image"]).exists()
    # the workers (the killed one included) left no temporary folders behind
    assert set(Path(tempfile.gettempdir()).glob("mmaudit*")) == before


def test_cli_executor_ray_gives_the_local_summary(tmp_path, ray):
    import json

    from typer.testing import CliRunner

    from mmaudit.cli import app

    args = ["audit", "--model", "zoo:L2", "--data", "synthetic:2", "--steps", "3", "--attacks", "end_pgd,nat_evid",
            "--n-boot", "100", "--ocr-limit", "0"]
    for name, extra in (("local", []), ("ray", ["--executor", "ray", "--ray-workers", "2"])):
        res = CliRunner().invoke(app, [*args, *extra, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
    local, remote = (json.loads((tmp_path / n / "summary.json").read_text()) for n in ("local", "ray"))
    assert local["models"] == remote["models"] and local["levels"] == remote["levels"]


def test_ray_actors_load_their_model_through_the_same_placement(tmp_path, ray):
    """Each actor resolves the run's placement itself (on a GPU node, auto is the GPU Ray gave it); here a tiny
    checkpoint in bfloat16 on CPU workers."""
    pytest.importorskip("transformers")
    from mmaudit.audit import AuditPlan, RayExecutor
    from mmaudit.models.hf.tiny import save_tiny
    from mmaudit.models.load import Placement, load_model

    path = save_tiny(tmp_path / "tiny")
    placement = Placement(dtype="bfloat16", activation_checkpointing="mlp")
    plan = AuditPlan.build(synthetic_set(1, seed=10_000, families=FAMILIES), AuditConfig(attacks=["end_pgd"]))
    ex = RayExecutor([f"{path}@L2"], plan, placement=placement)
    (meta,) = ex.metas()
    ex.close()
    local = load_model(f"{path}@L2", placement)
    assert (meta["device"], meta["dtype"], meta["activation_checkpointing"]) == ("cpu", "bfloat16", "mlp")
    assert meta["fingerprint"] == local.fingerprint  # the same model, loaded the same way


def test_an_actor_still_loading_is_not_taken_for_one_with_no_room(ray):
    """Ray reports both as PENDING_CREATION; only the one with no worker process is waiting for room (a large
    checkpoint's actor loads for minutes and must not end the run as 'no node has room')."""
    import time

    from mmaudit.audit.executors import unplaced

    @ray.remote(num_cpus=2)
    class Slow:
        def __init__(self):
            time.sleep(120)  # still loading when looked at, however late its worker process started

    loading, waiting = Slow.remote(), Slow.remote()
    try:
        assert wait_for_worker(loading) and actor_info(waiting)  # both registered, the first one placed
        assert not unplaced(loading) and unplaced(waiting)
    finally:
        ray.kill(loading)
        ray.kill(waiting)


def test_the_next_models_actor_gives_back_the_room_the_current_model_waits_for(ray):
    """The next model's actors are asked for early (to load while this model runs); when Ray places them first on
    a cluster with room for one actor, the current model's actor would wait until the place timeout ended the run:
    the next model's actor gives its room back, and is asked for again once the current one runs."""
    import time

    from mmaudit.audit import AuditPlan, RayExecutor
    from mmaudit.audit.executors import unplaced

    plan = AuditPlan.build(synthetic_set(1, seed=10_000, families=FAMILIES), AuditConfig(attacks=["end_pgd"]))
    ex = RayExecutor(["zoo:L1", "zoo:L2"], plan, cpus_per_worker=2)  # the local Ray has 2 CPUs: one actor fits
    try:
        ex._ask(1)  # the next model's actor first: it takes the only room
        assert wait_for_worker(ex.actors[1][0]) and not unplaced(ex.actors[1][0])
        started = time.monotonic()
        assert ex.meta(0)["fingerprint"] == load_zoo("L1").fingerprint  # before: 'no node has room' after 60 s
        assert time.monotonic() - started < ex.place_timeout
        assert ex.actors[1]  # asked for again, to wait in Ray's queue for the room model 0 holds
    finally:
        ex.close()
