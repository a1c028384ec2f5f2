"""The natural-question benchmark: hand-written questions over whole Debian documentation corpora.

Corpora (`<corpus>.corpus.json`) and questions (`<corpus>.questions.jsonl`) live beside this file;
their format is described in `README.md` there. `check.py` proves every question against the rendered
text; `bench.py` runs them against V1 and V2 of a real service (`scripts/bench quality --natural`).
"""
