"""The built-in transforms: channels (jpeg, resize) and defences (bitdepth, median, blur, random-resize-pad)."""

from mmaudit.models.transforms import bitdepth, blur, jpeg, median, random_resize_pad, resize  # noqa: F401
