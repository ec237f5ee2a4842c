"""The audit's units of work over one chunk: clean pass, a pixel attack, a text attack, layer recovery, transfer,
and a MANTIS stability run (the sweep).

A unit runs on a loaded model and returns its records together with the PNG
files they name (run-folder path -> bytes). Units never touch the run folder:
the driver writes the files, then the records, so a local run and a Ray run
(whose workers live on other machines) are the same code path, and a worker
leaves nothing behind. Every PNG is checked to decode to exactly the pixels
that were judged, and a pixel flip counts only if the decoded PNG still flips.
Rendered-text edits do not depend on the model: each is made once per sample
(:class:`EditCache`) and shared by every model a worker process holds.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from mmaudit.audit.config import MAX_NEW_TOKENS, AuditConfig
from mmaudit.audit.plan import recovery_keys
from mmaudit.data.sample import Sample, sample_fingerprint
from mmaudit.errors import InputError
from mmaudit.judge.match import Judge
from mmaudit.models.blackbox import failed, reply_problem
from mmaudit.models.vlm import VLM, Target, pixels
from mmaudit.pathways.diagnostics.recovery import recover, unsupported
from mmaudit.pathways.text import Edit
from mmaudit.pathways.text.runner import run_text_chunk
from mmaudit.store import key_of


@dataclass
class UnitResult:
    """A unit's records and the files they name (relative path -> PNG bytes)."""

    records: list[dict]
    files: dict[str, bytes] = field(default_factory=dict)

    @staticmethod
    def merge(parts: list[UnitResult]) -> UnitResult:
        """The parts of a unit that was cut in two, as the unit's one result (a record once per key)."""
        records = {r["key"]: r for p in parts for r in p.records}
        return UnitResult(list(records.values()), {k: v for p in parts for k, v in p.files.items()})


def png_bytes(image: np.ndarray, where: str) -> bytes:
    """Encode losslessly and check the round trip: what is saved is exactly what was judged."""
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    data = buf.getvalue()
    if not np.array_equal(decode_png(data), image):
        raise RuntimeError(f"{where}: the PNG does not decode to the judged pixels")
    return data


def decode_png(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def prompt_field(s: Sample) -> dict:
    """The text prompt the model was shown, where it is more than the dataset's question."""
    return {"prompt": s.prompt} if s.instruction else {}


def model_fields(vlm: VLM) -> dict:
    return {"model": vlm.name, "level": vlm.level, "fingerprint": vlm.fingerprint}


def model_settings(vlm: Target) -> dict:
    """Where and how a model ran: device, precision, the GPU's name (and an adapter's own settings); a target
    that only answers runs at its endpoint."""
    import torch

    if not isinstance(vlm, VLM):
        return {"device": "endpoint", "dtype": None, "gpu": None, "black_box": True} | vlm.settings()
    device = torch.device(vlm.device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"device": str(device), "dtype": str(vlm.dtype).removeprefix("torch."), "gpu": gpu} | vlm.settings()


def clean_unit(vlm: Target, chunk: list[Sample], keys: list[str], judge: Judge, reference: str = "label") -> UnitResult:
    """Answer a chunk on its clean images (and keep each image for the report). ``reference="self"``: the model's
    own answer is what attacks are judged against, so C is every sample it answered (the label's verdict is kept
    as ``label_correct``)."""
    answers = vlm.generate(pixels([s.image for s in chunk]), [s.prompt for s in chunk], MAX_NEW_TOKENS)
    files = {f"clean/{sample_fingerprint(s)}.png": png_bytes(s.image, f"sample {s.id!r}") for s in chunk}
    records = []
    black_box = not isinstance(vlm, VLM)
    for s, a, k in zip(chunk, answers, keys):
        right = bool(judge.correct(a, s)) and not failed(a)  # no reply is no answer: out of C, counted
        mode = {"reference_mode": "self", "label_correct": right} if reference == "self" else {}
        problem = reply_problem(a) if black_box else None
        records.append({"kind": "clean", "key": k, **model_fields(vlm), "sample": s.id, "family": s.task_family,
                        "answer_type": s.answer_type, "reference": s.answer, "question": s.question,
                        **prompt_field(s), "answer": a, "correct": bool(a.strip()) if mode else right,
                        "image": f"clean/{sample_fingerprint(s)}.png"} | mode
                       | ({"reply_error": problem, "failed": failed(a)} if problem else {}))
    return UnitResult(records, files)


def base_record(vlm: VLM, s: Sample, key: str, attack: str, params: dict) -> dict:
    return {"kind": "attack", "key": key, **model_fields(vlm), "sample": s.id, "family": s.task_family,
            "attack": attack, "params": params, "reference": s.answer, "question": s.question, **prompt_field(s)}


def pixel_attack_unit(vlm: VLM, attack, chunk: list[Sample], keys: list[str], judge: Judge, verify: bool,
                      params: dict) -> UnitResult:
    res = attack(vlm, chunk)
    paths = [f"adv/{attack.name}/{key}.png" for key in keys]
    files = {p: png_bytes(adv, p) for p, adv in zip(paths, res.adv_uint8)}
    verified = list(res.flipped)
    flips = [i for i, f in enumerate(res.flipped) if f]
    if verify and flips:  # a flip counts only if the decoded PNG still flips
        again = vlm.generate(pixels([decode_png(files[paths[i]]) for i in flips]), [chunk[i].prompt for i in flips],
                             attack.max_new_tokens)
        for i, a in zip(flips, again):
            verified[i] = not judge.correct(a, chunk[i])
    records = [
        base_record(vlm, s, key, attack.name, params)
        | {"answer": ans, "flipped": bool(ok), "steps": st, "passes": ps, "linf": li, "image": p}
        for s, key, ans, ok, st, ps, li, p in zip(chunk, keys, res.answers, verified, res.steps, res.passes,
                                                  res.linf, paths)
    ]
    if getattr(attack, "restarts", 1) > 1:  # which run's image was kept (single-run records stay as they were)
        for rec, r in zip(records, res.restart):
            rec["restart"] = r
    if res.member:  # an ensemble: the member (and its run) whose image was kept, what each member it reached cost
        for rec, m, mp, r in zip(records, res.member, res.member_passes, res.restart):
            rec["member"], rec["member_passes"], rec["restart"] = m, mp, r
    return UnitResult(records, files)


class EditCache:
    """Each text attack's edit of each sample, made once and shared by every model of the process."""

    def __init__(self) -> None:
        self._edits: dict[tuple[str, str], tuple[Edit | InputError, str | None, bytes | None]] = {}

    def get(self, attack, s: Sample) -> tuple[Edit | InputError, str | None, bytes | None]:
        """(the edit or why it failed, its run-folder path, its PNG bytes)."""
        k = (attack.name, s.id, s.meta.get("wrong_answer"))  # under --reference self each model has its own
        if k not in self._edits:
            try:
                edit: Edit | InputError = attack(s)
            except InputError as e:
                edit = e
            path = data = None
            if isinstance(edit, Edit):
                name = key_of(sample=sample_fingerprint(s), attack=attack.params(), wrong=s.meta.get("wrong_answer"))
                path = f"adv/{attack.name}/{name}.png"
                data = png_bytes(edit.image, path)
            self._edits[k] = (edit, path, data)
        return self._edits[k]


def text_attack_unit(vlm: VLM, attack, chunk: list[Sample], keys: list[str], edits: EditCache, judge: Judge,
                     cfg: AuditConfig, params: dict) -> UnitResult:
    got = [edits.get(attack, s) for s in chunk]
    results = run_text_chunk(vlm, chunk, [e for e, _, _ in got], judge, cfg.text)
    records = [base_record(vlm, s, key, attack.name, params) | res | {"image": path, "passes": 0}
               for s, key, res, (_, path, _) in zip(chunk, keys, results, got)]
    return UnitResult(records, {path: data for _, path, data in got if path is not None})


def transfer_unit(vlm: Target, chunk: list[Sample], keys: list[str], images: list[np.ndarray], source: dict,
                  paths: list[str], judge: Judge) -> UnitResult:
    """Another model's saved adversarial images (``source``: its model, fingerprint, attack and parameters) shown
    to this one with the same prompt; a flip is judged as any other, on this model's own clean-correct set."""
    answers = vlm.generate(pixels(images), [s.prompt for s in chunk], MAX_NEW_TOKENS)
    black_box = not isinstance(vlm, VLM)
    records = []
    for s, key, a, path in zip(chunk, keys, answers, paths):
        problem = reply_problem(a) if black_box else None
        records.append({"kind": "transfer", "key": key, **model_fields(vlm), "sample": s.id, "family": s.task_family,
                        "source": source["model"], "source_fingerprint": source["fingerprint"],
                        "source_members": source.get("members", [source["fingerprint"]]),
                        "attack": source["attack"], "params": source["params"], "image": path,
                        "reference": s.answer, "question": s.question, **prompt_field(s), "answer": a,
                        "flipped": not judge.correct(a, s) and not failed(a)}
                       | ({"non_adaptive": True} if source.get("non_adaptive") else {})
                       | ({"reply_error": problem} if problem else {}) | ({"error": problem} if failed(a) else {}))
    return UnitResult(records)


def sweep_attack(run: dict, judge: Judge | None = None):
    """The MANTIS run of a sweep unit: one (seed, eps) at the largest budget, every smaller budget a checkpoint."""
    from mmaudit.pathways.pixel import MANTIS

    budgets = tuple(run["budgets"])
    return MANTIS(eps=run["eps"], steps=budgets[-1], seed=run["seed"], early_stop=run["early_stop"],
                  checkpoints=budgets, max_new_tokens=run["max_new_tokens"], judge=judge or Judge())


def sweep_unit(vlm: VLM, chunk: list[Sample], keys: list[str], judge: Judge, run: dict) -> UnitResult:
    """Per sample, whether MANTIS has flipped it by each budget of ``run`` (seed, eps, budgets, early_stop,
    max_new_tokens)."""
    res = sweep_attack(run, judge)(vlm, chunk)
    return UnitResult([{"kind": "sweep", "key": k, **model_fields(vlm), "sample": s.id, "seed": run["seed"],
                        "eps": run["eps"], "flipped_at": {str(b): bool(res.flipped_at.get(b, res.flipped)[i])
                                                          for b in run["budgets"]}}
                       for i, (s, k) in enumerate(zip(chunk, keys))])


def recovery_unit(vlm: VLM, chunk: list[Sample], adversarial: list[np.ndarray], judge: Judge,
                  cfg: AuditConfig) -> UnitResult:
    why = unsupported(vlm)
    if why:
        return UnitResult([{"kind": "recovery_excluded", "key": key_of(kind="recovery_excluded",
                                                                         model=vlm.fingerprint),
                            **model_fields(vlm), "reason": why}])
    rows = recover(vlm, chunk, adversarial, judge, MAX_NEW_TOKENS, cfg.recovery_positions)
    return UnitResult([{"kind": "recovery", "key": k, **model_fields(vlm), "positions": cfg.recovery_positions} | row
                       for k, row in zip(recovery_keys(vlm.fingerprint, chunk, cfg), rows)])
