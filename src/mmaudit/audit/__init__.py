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


class _CallableModule(__import__("types").ModuleType):
    """``mmaudit.audit(models, data, ...)`` is the public audit function (:func:`mmaudit.api.audit`), and
    ``mmaudit.audit`` is also this package: Python binds a package's submodule to the parent's attribute of the
    same name when it is first imported, which would hide a function of that name; so this package itself is
    callable and calls the function."""

    def __call__(self, *args, **kwargs):
        from mmaudit.api import audit

        return audit(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallableModule
