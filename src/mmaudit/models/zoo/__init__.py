"""The embedded zoo: tiny VLMs trained on synthetic visual QA, one per fusion level."""

from mmaudit.models.zoo.adapter import ZooAdapter, load_zoo, model_card

__all__ = ["ZooAdapter", "load_zoo", "model_card"]
