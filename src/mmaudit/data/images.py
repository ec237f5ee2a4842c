"""Reading an image from untrusted input: refused before decoding when hostile, converted and said when odd.

Every loader of user images (audit data, ``bench build`` inputs, ``bench run``
rows) goes through :func:`load_rgb`, so one rule holds everywhere: a file whose
header announces more than ``max_pixels`` pixels is refused before a pixel is
decoded (a decompression bomb: a few KB on disk, gigabytes in memory), a path
that leaves its dataset folder is refused, and any image that is not plain
8-bit RGB is converted with a note that says how (animated: first frame;
16-bit: scaled to 8 bits; CMYK, palette, greyscale: converted; alpha: laid on
white). Refusals are :class:`InputError`s naming the sample and the field.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from mmaudit.errors import InputError

MAX_PIXELS = 40_000_000  # about 6300 x 6300; a 20000 x 20000 bomb announces 400 M


def inside(root: Path, relative: str, sample_id: str, field: str = "image") -> Path:
    """``root / relative`` when it stays inside ``root`` (no absolute paths, no '..' out of it)."""
    if not isinstance(relative, str) or not relative.strip():
        raise InputError(sample_id, field, f"expected a relative file path, got {type(relative).__name__} "
                                           f"{relative!r:.60}")
    path = (root / relative).resolve()
    if Path(relative).is_absolute() or not path.is_relative_to(root.resolve()):
        raise InputError(sample_id, field, f"path {relative!r} leaves the dataset folder {root}: refused")
    return path


def load_rgb(path: Path, sample_id: str, field: str = "image", max_pixels: int = MAX_PIXELS
             ) -> tuple[np.ndarray, list[str]]:
    """(H, W, 3) uint8 pixels and the notes on what was converted; an :class:`InputError` when refused."""
    notes: list[str] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:  # reads the header only
                w, h = im.size
                if w * h > max_pixels:
                    raise InputError(sample_id, field, f"decompression bomb refused before decoding: {w} x {h} = "
                                                       f"{w * h} pixels > max_pixels {max_pixels} ({path})")
                frames = getattr(im, "n_frames", 1)
                if frames > 1:
                    im.seek(0)
                    notes.append(f"animated ({frames} frames): first frame used")
                return _rgb(im, notes), notes
    except InputError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise InputError(sample_id, field, f"decompression bomb refused before decoding: {e} ({path})") from None
    except FileNotFoundError:
        raise InputError(sample_id, field, f"file not found: {path}") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise InputError(sample_id, field, f"not a readable image: {path} ({e})") from None
    except MemoryError:
        raise InputError(sample_id, field, f"image too large to convert in memory: {path}") from None


def _rgb(im: Image.Image, notes: list[str]) -> np.ndarray:
    mode = im.mode
    if mode == "RGB":
        return np.asarray(im, dtype=np.uint8).copy()
    if mode.startswith("I") or mode == "F":  # 16-bit and 32-bit greyscale: scaled to 8 bits
        a = np.asarray(im, dtype=np.float64)
        top = 65535.0 if mode.startswith("I;16") or a.max(initial=0) > 255 else 255.0
        g = np.clip(a / top * 255.0, 0, 255).round().astype(np.uint8)
        notes.append(f"{mode} image scaled to 8-bit RGB")
        return np.repeat(g[..., None], 3, axis=2)
    if "A" in mode or (mode == "P" and "transparency" in im.info):
        rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        notes.append(f"{mode} image with transparency laid on white")
        return np.asarray(Image.alpha_composite(white, rgba).convert("RGB"), dtype=np.uint8).copy()
    notes.append(f"{mode} image converted to RGB")
    return np.asarray(im.convert("RGB"), dtype=np.uint8).copy()


def png_data_url(image: np.ndarray) -> str:
    """(H, W, 3) uint8 pixels as a lossless PNG data URL: how an image travels in a chat request."""
    import base64
    import io

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
