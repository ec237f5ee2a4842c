"""`mmaudit bench build`: questions + clean evidence -> a QIMG-7-style benchmark folder.

Per question: validate, take the first loadable clean image, check it is on
topic, pollute each of its five passages (family preassigned by seed), apply
the seven image operators, write every image and re-read it, and emit the 16
regime rows in the release's layout. A question that fails any stage is
dropped with its stage and reason (never silently); the counts follow the
paper's Table 11, the family counts its Table 9. Finished questions are kept
in the run store, so a killed build resumes.
"""

from __future__ import annotations

import hashlib
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from mmaudit.errors import InputError
from mmaudit.rag.construct.false_evidence import llm_false_captions
from mmaudit.rag.construct.image_pollution import (
    ImageItem,
    OpContext,
    adversarial_patch,
    caption_flip,
    entity_swap,
    figstep_typography,
    image_blend,
    neural_style_transfer,
    semantic_entity_rewrite,
)
from mmaudit.rag.construct.image_pollution.encoders import ZooConceptEncoder
from mmaudit.rag.construct.inputs import QuestionInput
from mmaudit.rag.construct.records import (
    IMAGE_ATTACKS,
    POOL_COLUMNS,
    REGIMES,
    TEXT_FAMILIES,
    ImageEvidence,
    ImageMetadata,
    RegimeRow,
    TextEvidence,
    regime_parts,
    write_rows,
    write_table,
)
from mmaudit.rag.construct.text_pollution import SWAPS, PollutionFailed, RulePolluter, assign_families
from mmaudit.store import RunStore, key_of

STAGES = ("input", "no clean image evidence", "preprocessing validation", "no polluted image evidence",
          "unusable packaged image")


@dataclass
class BuildConfig:
    family_seed: int = 42  # the family draw is seeded per dataset with it (D.3)
    seed: int = 0
    k_passages: int = 5
    limit: int | dict[str, int] | None = None  # evaluation cap per dataset (D.4): N for every one, or per name
    families: dict[tuple[str, str], list[str]] | None = None  # a fixed preassignment (dataset, qid) -> families
    polluter: Callable = field(default_factory=RulePolluter)  # RulePolluter or LLMPolluter
    ontopic: Callable | None = None  # OnTopic(); None skips the check (recorded in the summary)
    rewrite_editor: object | None = None  # None: the offline LocalRecolour
    patch_encoder: object | None = None  # None: the zoo's glyph encoder
    style_net: object | None = None  # None: fixed random features
    patch_steps: int = 60
    style_steps: int = 80
    caption_model: object | None = None  # a ChatModel for E.6 false captions; None: authored or rule-made


class Drop(Exception):
    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage, self.reason = stage, reason


def describe(polluter) -> str:
    """A stable name for the store key (an LLM polluter by its model, a rule polluter by its class)."""
    model = getattr(polluter, "model", None)
    return f"llm:{model.name}:{getattr(polluter, 'retries', '')}" if model is not None else type(polluter).__name__


def qid_order(qid: str) -> tuple:
    """Dataset order of question ids: numeric ids as numbers (2 before 10), then any others by text."""
    q = str(qid)
    return (0, int(q), "") if q.isdigit() else (1, 0, q)


def cap_of(limit: int | dict[str, int] | None, dataset: str) -> int | None:
    """A dataset's evaluation cap: ``limit`` itself, or its entry by dataset name (case-insensitive)."""
    if limit is None or isinstance(limit, int):
        return limit
    caps = {k.lower(): v for k, v in limit.items()}
    return caps.get(dataset.lower())


def read_families(path: Path) -> dict[tuple[str, str], list[str]]:
    """A fixed family preassignment (AlpacaFact's release labels): CSV or JSONL rows of dataset, qid, passage
    (0-based) and family; every family must be one of the four."""
    import csv
    import json

    text = Path(path).read_text()
    rows = [json.loads(x) for x in text.splitlines() if x.strip()] if path.suffix == ".jsonl" else \
        list(csv.DictReader(text.splitlines()))
    out: dict[tuple[str, str], dict[int, str]] = {}
    for n, r in enumerate(rows, 1):
        fam = str(r.get("family", "")).strip().title()
        if fam not in TEXT_FAMILIES:
            raise InputError(f"{path.name}:{n}", "family", f"{r.get('family')!r} is not one of {TEXT_FAMILIES}")
        try:
            key, idx = (str(r["dataset"]).lower(), str(r["qid"])), int(r["passage"])
        except (KeyError, ValueError) as e:
            raise InputError(f"{path.name}:{n}", "row", f"needs dataset, qid, passage: {e}") from None
        out.setdefault(key, {})[idx] = fam
    return {k: [v[i] for i in sorted(v)] for k, v in out.items()}


def _false_fields(q: QuestionInput, polluted: list[TextEvidence]) -> tuple[str, str, str]:
    """Authored false caption/claim/target, else rule-made ones (the LLM route is E.6's prompt)."""
    rng = np.random.default_rng(zlib.crc32(q.qid.encode()))
    place, year = SWAPS[int(rng.integers(len(SWAPS)))], int(rng.integers(1900, 2000))
    caption = q.false_caption or f"{q.subject} in {place}, {year}"
    claim = q.false_claim or polluted[0].snippet.split(". ")[0].rstrip(".") + "."
    target = q.false_target or SWAPS[int(rng.integers(len(SWAPS)))].upper()
    return caption, claim, target


def _clean_image(q: QuestionInput) -> tuple[int, np.ndarray]:
    errors = []
    for i, im in enumerate(q.images):
        try:
            pixels = im.load(q.qid)
            if pixels.ndim != 3 or min(pixels.shape[:2]) < 16:
                raise InputError(q.qid, "images", f"image {i} is too small: {pixels.shape}")
            return i, pixels
        except InputError as e:
            errors.append(e.reason)
    raise Drop("no clean image evidence", "; ".join(errors) or "no image")


def _save(image: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(path)
    with Image.open(path) as im:  # the packaged image must load
        if np.asarray(im.convert("RGB")).shape != image.shape:
            raise Drop("unusable packaged image", f"{path.name} does not reload")


class Builder:
    def __init__(self, out: Path, cfg: BuildConfig) -> None:
        self.out, self.cfg = out, cfg
        self.store = RunStore(out / "build.jsonl")
        self._encoder = cfg.patch_encoder

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = ZooConceptEncoder()
        return self._encoder

    def question(self, q: QuestionInput, families: list[str], donors: list[ImageItem], image_idx: int,
                 clean: np.ndarray) -> dict:
        cfg = self.cfg
        passages = q.passages[: cfg.k_passages]
        if q.polluted_passages:
            polluted = q.polluted_passages[: cfg.k_passages]
            fams, rationales = ["provided"] * len(polluted), ["provided with the input"] * len(polluted)
        else:
            polluted, fams, rationales = [], [], []
            for p, fam in zip(passages, families):
                try:
                    res = cfg.polluter(q.question, p.title, p.snippet, fam)
                except PollutionFailed as e:
                    raise Drop("preprocessing validation", f"text pollution of {p.title!r} failed: {e}") from None
                polluted.append(TextEvidence(title=p.title, snippet=res.polluted, url=p.url))
                fams.append(res.family)
                rationales.append(res.rationale)
        caption, claim, target = _false_fields(q, polluted)
        img = q.images[image_idx]
        if cfg.caption_model is not None:  # E.6: three false captions and the ANNOTATION line
            try:
                captions, annotation = llm_false_captions(cfg.caption_model, q.subject,
                                                          [i.alt_text for i in q.images])
            except ValueError as e:
                raise Drop("no polluted image evidence", f"caption_flip: {e}") from None
            caption = captions[0]
            claim = q.false_claim or annotation  # the false image label is what the typography renders
        item = ImageItem(q.qid, q.question, q.subject, clean, img.alt_text, img.title, img.page_url, img.image_url)
        ctx = OpContext(donors=donors, false_claim=claim, false_caption=caption, false_target=target, seed=cfg.seed)
        ops = {
            "caption_flip": lambda: caption_flip(item, ctx),
            "entity_swap": lambda: entity_swap(item, ctx),
            "semantic_entity_rewrite": lambda: semantic_entity_rewrite(item, ctx, cfg.rewrite_editor),
            "figstep_typography": lambda: figstep_typography(item, ctx),
            "adversarial_patch": lambda: adversarial_patch(item, ctx, self.encoder, steps=cfg.patch_steps),
            "image_blend": lambda: image_blend(item, ctx),
            "neural_style_transfer": lambda: neural_style_transfer(item, ctx, cfg.style_net, steps=cfg.style_steps),
        }
        # Opaque file names (content hashes): a path that said "caption_flip" would leak the regime.
        digest = hashlib.sha256(np.ascontiguousarray(clean).tobytes()).hexdigest()
        clean_rel = f"images/{q.dataset}/{key_of(q=q.qid, sha=digest)}.png"
        _save(clean, self.out / clean_rel)
        images = {"clean": {"path": clean_rel, "alt_text": img.alt_text,
                            "method": "", "prompt": "", "donor": "", "rationale": "", "params": {}, "sha256": "",
                            "change": 0.0}}
        for name in IMAGE_ATTACKS:
            try:
                res = ops[name]()
            except (ValueError, InputError) as e:
                raise Drop("no polluted image evidence", f"{name}: {e}") from None
            rel = f"images/{q.dataset}/{key_of(q=q.qid, sha=res.sha256)}.png"
            _save(res.image, self.out / rel)
            change = float(np.abs(res.image.astype(int) - clean.astype(int)).mean()) \
                if res.image.shape == clean.shape else float("nan")
            images[name] = {"path": rel, "alt_text": res.alt_text, "method": res.method, "prompt": res.prompt,
                            "donor": res.donor_qid, "rationale": res.rationale, "params": res.params,
                            "sha256": res.sha256, "change": change}
        return {"passages": [p.model_dump() for p in passages], "polluted": [p.model_dump() for p in polluted],
                "families": fams, "rationales": rationales, "images": images, "image_idx": image_idx,
                "false": {"caption": caption, "claim": claim, "target": target}}


def _rows(q: QuestionInput, built: dict, start: int) -> list[RegimeRow]:
    img = q.images[built["image_idx"]]
    rows = []
    for j, regime in enumerate(REGIMES):
        text, attack = regime_parts(regime)
        ev = built["passages"] if text == "clean" else built["polluted"]
        im = built["images"][attack]
        meta = ImageMetadata(question_idx=int(q.qid) if q.qid.isdigit() else q.qid, image_idx=built["image_idx"],
                             manipulation_method=im["method"], manipulation_prompt=im["prompt"],
                             donor_question_idx=im["donor"], rationale=im["rationale"], original_alt=img.alt_text,
                             polluted_alt=built["images"]["caption_flip"]["alt_text"])
        rows.append(RegimeRow(
            row_id=start + j, qid=int(q.qid) if q.qid.isdigit() else q.qid, dataset=q.dataset, question=q.question,
            regime=regime, text_status=text, image_status="clean" if attack == "clean" else "polluted",
            image_pollution_type=attack, text_evidence=[TextEvidence(**p) for p in ev],
            image_evidence=ImageEvidence(image_url=img.image_url, url=img.image_url, alt_text=im["alt_text"],
                                         title=img.title, page_url=img.page_url, resolved_local_path=im["path"],
                                         local_path=im["path"], pollution_type=attack, metadata=meta)))
    return rows


def preassign(valid: list, cfg: BuildConfig) -> dict[tuple[str, str], list[str]]:
    """Each question's passage families, fixed before generation: from ``cfg.families`` where it has the
    question, else drawn per dataset with its own generator seeded ``cfg.family_seed`` (D.3: seed 42),
    passage by passage in dataset order."""
    out: dict[tuple[str, str], list[str]] = {}
    by_dataset: dict[str, list] = {}
    for q, *_ in valid:
        by_dataset.setdefault(q.dataset, []).append(q)
    for ds, qs in by_dataset.items():
        n = [min(len(q.passages), cfg.k_passages) for q in qs]
        drawn = assign_families(sum(n), cfg.family_seed)
        offset = 0
        for q, k in zip(qs, n):
            fixed = (cfg.families or {}).get((ds.lower(), str(q.qid)))
            if fixed is not None and len(fixed) < k:
                raise InputError(f"{ds}:{q.qid}", "families", f"{len(fixed)} preassigned families for {k} passages")
            out[(q.dataset, q.qid)] = list(fixed[:k]) if fixed else drawn[offset : offset + k]
            offset += k
    return out


def build_benchmark(inputs: list[QuestionInput | InputError], out: Path, cfg: BuildConfig,
                    progress: Callable[[str, int, int], None] | None = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    builder = Builder(out, cfg)
    drops: list[dict] = [{"qid": e.sample_id, "stage": "input", "reason": f"{e.field}: {e.reason}"}
                         for e in inputs if isinstance(e, InputError)]
    questions = sorted((q for q in inputs if isinstance(q, QuestionInput)),
                       key=lambda q: (q.dataset, qid_order(q.qid)))  # each dataset in its own order (D.4)
    valid: list[tuple[QuestionInput, int, np.ndarray, float | None]] = []
    for q in questions:
        try:
            if not q.question.strip() or not q.passages:
                raise Drop("preprocessing validation", "no text evidence" if q.question.strip() else "empty question")
            idx, pixels = _clean_image(q)
            score = None
            if cfg.ontopic is not None:
                ok, score = cfg.ontopic(q.subject, f"{q.images[idx].alt_text}. {q.images[idx].title}")
                if not ok:
                    raise Drop("preprocessing validation", f"off-topic image (similarity {score:.2f})")
            valid.append((q, idx, pixels, score))
        except Drop as d:
            drops.append({"qid": q.qid, "stage": d.stage, "reason": d.reason})
    donors = [ImageItem(q.qid, q.question, q.subject, px, q.images[i].alt_text, q.images[i].title,
                        q.images[i].page_url, q.images[i].image_url) for q, i, px, _ in valid]
    families = preassign(valid, cfg)
    built: list[tuple[QuestionInput, dict]] = []
    kept: Counter = Counter()
    not_selected = 0
    for n, (q, idx, pixels, score) in enumerate(valid, 1):
        cap = cap_of(cfg.limit, q.dataset)
        if cap is not None and kept[q.dataset] >= cap:  # the evaluation cap: usable but not selected
            not_selected += 1
            if progress:  # a question passed over still moves the bar: it ends at its total
                progress("building questions", n, len(valid))
            continue
        fams = families[(q.dataset, q.qid)]
        key = key_of(kind="question", qid=q.qid, dataset=q.dataset, question=q.question, families=fams,
                     passages=[p.model_dump() for p in q.passages], seed=cfg.seed, polluter=describe(cfg.polluter),
                     image=hashlib.sha256(np.ascontiguousarray(pixels).tobytes()).hexdigest(),
                     steps=(cfg.patch_steps, cfg.style_steps))
        rec = builder.store.get(key)
        if rec is None or not all((out / im["path"]).exists() for im in rec["built"]["images"].values()):
            try:
                rec = {"kind": "question", "key": key, "qid": q.qid, "dataset": q.dataset, "ontopic": score,
                       "built": builder.question(q, fams, donors, idx, pixels)}
            except Drop as d:
                rec = {"kind": "drop", "key": key, "qid": q.qid, "stage": d.stage, "reason": d.reason}
            builder.store.put(rec)
        if rec["kind"] == "drop":
            drops.append({"qid": q.qid, "stage": rec["stage"], "reason": rec["reason"]})
        else:
            built.append((q, rec["built"]))
            kept[q.dataset] += 1
        if progress:
            progress("building questions", n, len(valid))
    usable = len(built) + not_selected
    capped = built
    by_dataset: dict[str, list[RegimeRow]] = {}
    pool: list[dict] = []
    for q, b in capped:
        rows = by_dataset.setdefault(q.dataset, [])
        rows += _rows(q, b, len(rows))
        for attack in IMAGE_ATTACKS:
            im = b["images"][attack]
            pool.append({"question_idx": q.qid, "question": q.question, "image_idx": b["image_idx"],
                         "pollution_type": attack, "original_image_url": q.images[b["image_idx"]].image_url,
                         "original_alt": q.images[b["image_idx"]].alt_text, "polluted_image_url": "",
                         "polluted_alt": im["alt_text"], "polluted_image_path": im["path"],
                         "manipulation_method": im["method"], "manipulation_prompt": im["prompt"],
                         "donor_question_idx": im["donor"], "rationale": im["rationale"]})
    files = []
    for dataset, rows in by_dataset.items():
        n_q = len(rows) // len(REGIMES)
        files.append(str(write_rows(rows, out / f"{dataset.lower()}_qimg7_mm_regimes_{n_q}.jsonl")))
        write_table(POOL_COLUMNS, [p for p in pool if p["question"] in {r.question for r in rows}],
                    out / "pool" / f"{dataset}_query_image_polluted.csv")
    write_table(["qid", "stage", "reason"], drops, out / "drops.csv")
    fam_counts = {ds: Counter() for ds in by_dataset}
    for q, b in capped:
        fam_counts[q.dataset].update(b["families"])
    stage = Counter(d["stage"] for d in drops)
    return {
        "files": files, "regimes_per_question": len(REGIMES), "questions": len(capped),
        "rows": sum(len(r) for r in by_dataset.values()),
        "counts": {"initial": len(inputs), "removed_input": stage["input"],
                   "removed_no_clean_image": stage["no clean image evidence"],
                   "removed_no_polluted_image": stage["no polluted image evidence"],
                   "removed_preprocessing": stage["preprocessing validation"],
                   "removed_unusable_image": stage["unusable packaged image"], "usable": usable,
                   "not_selected_cap": usable - len(capped), "final": len(capped)},
        "families": {ds: {f: c[f] for f in (*TEXT_FAMILIES, "provided") if c[f] or f != "provided"}
                     for ds, c in fam_counts.items()},
        "operators": {a: {"applied": len(capped),
                          "methods": sorted({b["images"][a]["method"] for _, b in capped}),
                          "mean_abs_change": float(np.nanmean([b["images"][a]["change"] for _, b in capped]))
                          if capped else float("nan")} for a in IMAGE_ATTACKS},
        "drops": drops, "ontopic_check": cfg.ontopic is not None,
        "image_notes": [{"qid": q.qid, "note": n} for q in inputs if isinstance(q, QuestionInput)
                        for im in q.images for n in im.notes],  # converted on load (animated, 16-bit, CMYK, ...)
    }
