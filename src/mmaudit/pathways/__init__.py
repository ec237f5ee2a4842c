"""The two visual pathways of FusionAudit and how their attacks combine into R0, R+ and delta."""

BASELINES = ("vis_pgd", "end_pgd", "typo_evid")
ENHANCED = {"mantis": ("vis_pgd", "end_pgd"), "nat_evid": ("typo_evid",)}  # delta is against these baselines
ORDER = ("vis_pgd", "end_pgd", "mantis", "typo_evid", "nat_evid")
NAMES = {"vis_pgd": "Vis-PGD", "end_pgd": "End-PGD", "mantis": "MANTIS", "typo_evid": "Typo-Evid",
         "nat_evid": "Nat-Evid"}
