"""The seven QIMG-7 image-pollution operators (one per file) and their registry."""

from mmaudit.rag.construct.image_pollution.base import ImageItem, OpContext, Polluted
from mmaudit.rag.construct.image_pollution.blend import image_blend
from mmaudit.rag.construct.image_pollution.caption_flip import caption_flip
from mmaudit.rag.construct.image_pollution.entity_swap import entity_swap
from mmaudit.rag.construct.image_pollution.patch import adversarial_patch
from mmaudit.rag.construct.image_pollution.rewrite import LocalRecolour, semantic_entity_rewrite
from mmaudit.rag.construct.image_pollution.style import neural_style_transfer
from mmaudit.rag.construct.image_pollution.typography import figstep_typography

__all__ = ["ImageItem", "LocalRecolour", "OpContext", "Polluted", "adversarial_patch", "caption_flip",
           "entity_swap", "figstep_typography", "image_blend", "neural_style_transfer", "semantic_entity_rewrite"]
