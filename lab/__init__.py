"""The evidence machinery beside the reading path: sweeps (lab.sweep), their fits and the records' statistics
(lab.fits, lab.verdicts, lab.batch_minimize), figures (lab.figures), the records' generated blocks (lab.records),
the code audit of committed rows (lab.code_audit, lab.code_replay) and the campaign (lab.campaign; its batches
seed after seed, lab.seeds). It imports the reading path; nothing on the reading path imports it
(tests/test_layout.py)."""
