"""Evaluating a stack on QIMG-7: prompts, branches, routers, judge, scoring, tables, audits, replay."""
