"""The two visual pathways of FusionAudit: pixel/ and text/ attacks, diagnostics/, and the registry
(:mod:`mmaudit.pathways.registry`) from which the audit, the risk accounting and the report learn every attack's
name, pathway, role, wrong-answer use, cost and union position."""
