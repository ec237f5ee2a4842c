"""FusionAudit's fusion levels (the paper's taxonomy): every place that lists them reads this module.

L1: a frozen or lightly adapted vision encoder joined to the language model by a projection; L2: joint multimodal
pretraining, visual tokens entering the backbone once through a connector; L3: visual information taking part in
the whole language computation (DeepStack's multi-layer re-injection, early fusion).
"""

from typing import Literal

Level = Literal["L1", "L2", "L3"]
LEVELS: tuple[str, ...] = ("L1", "L2", "L3")
