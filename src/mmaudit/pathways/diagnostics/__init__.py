"""FusionAudit diagnostics: OAR (attention on the inserted region) and layer recovery.

RUG is computed with each text attack (:mod:`mmaudit.pathways.text.runner`); the MANTIS stability sweep is
driven by :mod:`mmaudit.audit.sweep`.
"""
