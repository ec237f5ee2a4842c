"""FusionAudit's run, in the order data flows: config -> plan -> units -> executors -> driver.

:mod:`~mmaudit.audit.config` says what to run; :mod:`~mmaudit.audit.plan` fixes the samples (wrong answers
included), the units and their keys once; :mod:`~mmaudit.audit.units` are the work itself (clean pass, pixel
attack, text attack, layer recovery, transfer, a sweep run); :mod:`~mmaudit.audit.executors` run units locally or
on Ray actors; :mod:`~mmaudit.audit.driver` walks the plan against the run store (:mod:`~mmaudit.audit.evidence`:
the OCR evidence check after the models). :mod:`~mmaudit.audit.transfer` shows saved images to other models and
:mod:`~mmaudit.audit.sweep` drives the MANTIS stability sweep through the same executors.
Imports point one way: nothing in :mod:`mmaudit.pathways` imports this package.
"""

from mmaudit.audit.config import AuditConfig, attack_params, make_attack
from mmaudit.audit.driver import drive, run_audit
from mmaudit.audit.executors import LocalExecutor, RayExecutor
from mmaudit.audit.plan import AuditPlan

__all__ = ["AuditConfig", "AuditPlan", "LocalExecutor", "RayExecutor", "attack_params", "drive", "make_attack",
           "run_audit"]
