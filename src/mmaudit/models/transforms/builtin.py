"""The built-in transforms: channels (jpeg, resize) and defences (bitdepth, median, blur, noise, random-jpeg,
random-resize-pad)."""

from mmaudit.models.transforms import (  # noqa: F401
    bitdepth,
    blur,
    jpeg,
    median,
    noise,
    random_jpeg,
    random_resize_pad,
    resize,
)
