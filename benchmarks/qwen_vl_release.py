"""The native Qwen-VL-Chat against the release's own modelling files, on the same tiny weights.

No code of the release is in this repository: the release side imports the release's Python files from a folder
you give it (``configuration_qwen.py``, ``modeling_qwen.py``, ``qwen_generation_utils.py``,
``tokenization_qwen.py``, ``visual.py``, as the Hugging Face repository ``Qwen/Qwen-VL-Chat`` ships them) and
runs in a separate virtual environment with the release's pins (its remote code needs transformers 4.32; mmaudit
runs on a current one). Two steps:

    # 1. mmaudit's side (this repository's venv): the tiny checkpoint in the released layout, written twice
    #    (the release's seq_length 2048, and 64 so dynamic NTK and log-n scaling act on a ~350-token prompt),
    #    three test images, and the native model's prompt ids, pixel values and logits
    .venv/bin/python benchmarks/qwen_vl_release.py ours --out /tmp/qwen-vl-check
    # 2. the release's side (a scratch venv: torch==2.13.0, transformers==4.32.0, "numpy<2", tiktoken, einops,
    #    matplotlib, safetensors, pillow, requests), its files in RELEASE_DIR
    /tmp/release-venv/bin/python benchmarks/qwen_vl_release.py release --out /tmp/qwen-vl-check \
        --release RELEASE_DIR

The release side loads the checkpoint with the release's ``QWenLMHeadModel.from_pretrained`` (no missing or
unexpected parameter allowed), builds the prompt with the release's tokenizer and ``make_context`` for
"Picture 1: <img>PATH</img>\\nQUESTION" (the release's model then reads the image file itself), and prints per
image: whether the ids equal mmaudit's outside the 256-position image span, the largest absolute logit difference
end to end and with mmaudit's pixel values handed to the release's vision tower, the largest pixel-value
difference of the two preprocessings, and (as the comparison's power) the difference when the release's model
runs with log-n scaling or dynamic NTK switched off.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch
from PIL import Image

QUESTIONS = {"a": ((40, 60), "How many bars?"),
             "b": ((97, 130), "What colour is the largest region? Answer in one word."),
             "c": ((56, 56), "x")}
SEQ_LENGTHS = (2048, 64)
SYSTEM = "You are a helpful assistant."


def ours(out: Path) -> None:
    from mmaudit.models.hf import load_hf
    from mmaudit.models.hf.qwen_vl.tiny import save_tiny_qwen_vl

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images = {}
    for name, ((h, w), _) in QUESTIONS.items():
        arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        arr[: h // 2] //= 2
        Image.fromarray(arr).save(out / f"img_{name}.png")
        images[name] = arr
    res = {}
    for seq_len in SEQ_LENGTHS:
        folder = save_tiny_qwen_vl(out / f"tiny-{seq_len}")
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(cfg | {"seq_length": seq_len}, indent=2))
        vlm = load_hf(folder, dtype="float32")
        for name, arr in images.items():
            question = QUESTIONS[name][1]
            enc = vlm.encode(torch.from_numpy(arr).permute(2, 0, 1).float()[None] / 255, [question])
            with torch.no_grad():
                logits = vlm.model(**vlm._inputs(enc), use_cache=False).logits[0]
            res[f"{seq_len}/{name}"] = {"ids": enc.input_ids[0].tolist(), "logits": logits, "question": question,
                                        "pixel_values": enc.image_inputs["pixel_values"],
                                        "path": str(out / f"img_{name}.png")}
    torch.save(res, out / "ours.pt")
    print(f"wrote {out / 'ours.pt'}: {len(res)} prompts")


def torchvision_shim() -> None:
    """Where torchvision does not import, the three transforms the release's ``visual.py`` builds, each doing
    what torchvision's does to a PIL image (PIL's own resize, /255 to CHW float, per-channel normalisation)."""
    try:
        import torchvision  # noqa: F401
        return
    except Exception:  # noqa: BLE001 - any import failure: use the shim
        pass

    class Compose:
        def __init__(self, ts):
            self.ts = ts

        def __call__(self, x):
            for t in self.ts:
                x = t(x)
            return x

    class Resize:
        def __init__(self, size, interpolation):
            self.size = size

        def __call__(self, img):
            return img.resize(self.size[::-1], Image.BICUBIC)

    class ToTensor:
        def __call__(self, img):
            return torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).float().div(255)

    class Normalize:
        def __init__(self, mean, std):
            self.mean, self.std = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]

        def __call__(self, t):
            return (t - self.mean) / self.std

    transforms = types.ModuleType("torchvision.transforms")
    transforms.Compose, transforms.Resize, transforms.ToTensor, transforms.Normalize = (
        Compose, Resize, ToTensor, Normalize)
    transforms.InterpolationMode = types.SimpleNamespace(BICUBIC="bicubic")
    sys.modules["torchvision"] = types.ModuleType("torchvision")
    sys.modules["torchvision"].transforms = transforms
    sys.modules["torchvision.transforms"] = transforms


def shown(model, pixel_values: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """The release's logits with these pixel values in place of what its vision tower reads from the file."""
    visual = model.transformer.visual
    encode, visual.encode = visual.encode, lambda _paths: visual(pixel_values)
    try:
        return model(input_ids=torch.tensor([ids])).logits[0]
    finally:
        visual.encode = encode


def release(out: Path, release_dir: Path) -> None:
    import transformers  # noqa: F401 - before the shim: transformers probes for a real torchvision at import

    torchvision_shim()
    pkg = types.ModuleType("qwen_release")  # the release's files use relative imports: load them as a package
    pkg.__path__ = [str(release_dir)]
    sys.modules["qwen_release"] = pkg
    cfg_mod = importlib.import_module("qwen_release.configuration_qwen")
    modeling = importlib.import_module("qwen_release.modeling_qwen")
    make_context = importlib.import_module("qwen_release.qwen_generation_utils").make_context
    tokenizer_cls = importlib.import_module("qwen_release.tokenization_qwen").QWenTokenizer
    mine = torch.load(out / "ours.pt")

    def prompt(tok, o: dict) -> list[int]:
        """The release's ChatML ids for the image's path and the question (its model reads the file itself)."""
        return make_context(tok, f"Picture 1: <img>{o['path']}</img>\n{o['question']}", system=SYSTEM,
                            chat_format="chatml")[1]

    def load(folder: Path, **off):
        cfg = cfg_mod.QWenConfig.from_pretrained(folder)
        for k, v in off.items():
            setattr(cfg, k, v)
        model, info = modeling.QWenLMHeadModel.from_pretrained(folder, config=cfg, torch_dtype=torch.float32,
                                                               output_loading_info=True)
        if any(info.values()):
            raise SystemExit(f"the release's model does not load the tiny checkpoint as it is: {info}")
        return model.eval()

    print("| seq_length | image | tokens | ids equal outside the image span | max abs logit diff, end to end | "
          "same pixels | max pixel-value diff | largest abs logit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for seq_len in SEQ_LENGTHS:
        folder = out / f"tiny-{seq_len}"
        model, tok = load(folder), tokenizer_cls(str(folder / "qwen.tiktoken"))
        visual = model.transformer.visual
        for name in QUESTIONS:
            o = mine[f"{seq_len}/{name}"]
            ids = prompt(tok, o)
            a, b = ids.index(tok.img_start_id), ids.index(tok.img_end_id)
            equal = len(ids) == len(o["ids"]) and ids[: a + 1] == o["ids"][: a + 1] and ids[b:] == o["ids"][b:]
            with torch.no_grad():
                ref = model(input_ids=torch.tensor([ids])).logits[0]
                pixels = visual.image_transform(Image.open(o["path"]).convert("RGB"))
                same_pixels = shown(model, o["pixel_values"], ids)
            print(f"| {seq_len} | {name} | {len(ids)} | {equal} | {(ref - o['logits']).abs().max():.2e} | "
                  f"{(same_pixels - o['logits']).abs().max():.2e} | "
                  f"{(pixels - o['pixel_values'][0]).abs().max():.2e} | {ref.abs().max():.2f} |")
    folder, o = out / f"tiny-{SEQ_LENGTHS[-1]}", mine[f"{SEQ_LENGTHS[-1]}/b"]
    ids = prompt(tok, o)
    for field in ("use_logn_attn", "use_dynamic_ntk"):  # what a wrong variant of the forward would show
        with torch.no_grad():
            d = (load(folder, **{field: False})(input_ids=torch.tensor([ids])).logits[0] - o["logits"]).abs().max()
        print(f"the release's model with {field} off, seq_length {SEQ_LENGTHS[-1]}, image b: max abs logit diff "
              f"{d:.2e}")
    with torch.no_grad():  # and with another image's pixels: how much the image moves the logits
        d = (shown(model, torch.flip(o["pixel_values"], dims=(-1,)), ids) - o["logits"]).abs().max()
    print(f"the release's model shown image b mirrored, seq_length {SEQ_LENGTHS[-1]}: max abs logit diff {d:.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("side", choices=("ours", "release"))
    ap.add_argument("--out", type=Path, required=True, help="folder shared by the two steps")
    ap.add_argument("--release", type=Path, help="folder holding the release's modelling files (step 2)")
    args = ap.parse_args()
    if args.side == "ours":
        ours(args.out)
    elif args.release is None:
        ap.error("the release side needs --release DIR")
    else:
        torch.set_num_threads(2)
        release(args.out, args.release)


if __name__ == "__main__":
    main()
