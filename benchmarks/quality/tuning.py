"""Offline tuning grids from the recorded `/query_v2` debug answers (pure): refusal policy and fusion.

**Refusal** (`app/evidence/query/refusal.py`). Hard reasons refuse whatever the knobs; soft signals are
weighed. From each query's `debug.refusal` the grid replays the decision for other knob values:
`weak_rerank` fires when `checked.best_score < min_rerank_score`, `low_coverage` when
`checked.coverage < min_coverage` (both recomputed), `no_agreement` and `rare_terms_missing` as
recorded (their thresholds, `agreement_depth`, `rare_share` and `rare_missing_share`, stay the
service's). A setting refuses when `Σ weights of the fired signals >= refuse_at`. An answerable
query the setting does not refuse returns the reranked list (`debug.stages.reranked` is exactly
the results before the decision), so its quality is that list's.

**Fusion** (`app/evidence/query/fusion.py`). `fuse` is run again on candidates rebuilt from the three
channel stage lists. Those lists are only k (at most 10) deep while the service fuses each
channel's top `channel_limit` (50), so a chunk ranked 11th or lower by a channel loses that vote
here; the replay of the service's own settings against its recorded `fused` list says how much
this matters (`fidelity`). Stage items carry no table, row or section, so location de-duplication
uses file, page and the first characters of the normalised content only.

Settings are chosen on the same questions they are measured on; `holdout` repeats the choice on one
half of the questions and reports the other half.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from app.evidence.query.fusion import fuse
from app.evidence.query.records import Candidate, Scored
from app.evidence.settings import ChannelWeights, FusionSettings, RefusalSettings
from app.text.chunk_records import ChunkPlace
from app.text.normalize import normalize
from benchmarks.quality.metrics import file_ranking, ndcg_at_k, recall_at_k
from benchmarks.quality.v2 import CHANNEL_STAGES, RefusalRecord, StageItem

TARGET_REFUSED = 0.90
TARGET_FALSE = 0.03
SOFT_SIGNALS = ("weak_rerank", "no_agreement", "rare_terms_missing", "low_coverage", "low_dense")
# the signals about words only (app/evidence/query/refusal.py): one other must fire for a soft refusal
LEXICAL_SIGNALS = frozenset({"weak_rerank", "rare_terms_missing", "low_coverage", "no_agreement"})

# ---- refusal --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RefusalCase:
    """One query's recorded refusal inputs, with the quality of its reranked list when answerable."""

    qid: str
    answerable: bool
    hard: bool
    best_score: float | None
    coverage: float | None
    no_agreement: bool
    rare_missing: bool
    recorded: bool  # what the service decided
    ndcg: float = 0.0  # of the reranked list (0 for unanswerable)
    r1: float = 0.0
    best_dense: float | None = None


def refusal_case(
    qid: str, answerable: bool, record: RefusalRecord, *, ndcg: float = 0.0, r1: float = 0.0
) -> RefusalCase:
    """A case from a parsed `debug.refusal`."""
    return RefusalCase(
        qid=qid,
        answerable=answerable,
        hard=bool(record.reasons),
        best_score=record.best_score,
        coverage=record.coverage,
        no_agreement="no_agreement" in record.signals,
        rare_missing="rare_terms_missing" in record.signals,
        recorded=record.refuse,
        ndcg=ndcg,
        r1=r1,
        best_dense=record.best_dense,
    )


@dataclass(frozen=True)
class RefusalSetting:
    """The knobs of `RefusalSettings` the grid varies."""

    min_rerank_score: float
    min_coverage: float
    weak_rerank: float
    no_agreement: float
    rare_terms_missing: float
    low_coverage: float
    refuse_at: float
    low_dense: float = 0.5
    min_dense_similarity: float = 0.25

    def weights(self) -> dict[str, float]:
        """`RefusalSettings.signals` of this setting."""
        return {code: getattr(self, code) for code in SOFT_SIGNALS}

    def as_env(self) -> str:
        """The setting as `RefusalSettings` fields, for the report."""
        w = ", ".join(f"{k} {v:g}" for k, v in self.weights().items())
        return (
            f"min_rerank_score {self.min_rerank_score:g}, min_coverage {self.min_coverage:g}, "
            f"refuse_at {self.refuse_at:g}, weights: {w}"
        )


def policy_setting(policy: RefusalSettings | None = None) -> RefusalSetting:
    """The setting of a `RefusalSettings` (default: the service's defaults)."""
    p = policy or RefusalSettings()
    w = p.signals.model_dump()
    return RefusalSetting(
        p.min_rerank_score,
        p.min_coverage,
        w.get("weak_rerank", 1.0),
        w.get("no_agreement", 1.0),
        w.get("rare_terms_missing", 1.0),
        w.get("low_coverage", 1.0),
        p.refuse_at,
        w.get("low_dense", 1.0),
        p.min_dense_similarity,
    )


def would_refuse(case: RefusalCase, s: RefusalSetting) -> bool:
    """The policy's decision for this case under setting `s` (mirrors `decide_refusal`)."""
    if case.hard:
        return True
    fired = []
    if case.best_score is not None and case.best_score < s.min_rerank_score:
        fired.append("weak_rerank")
    if case.no_agreement:
        fired.append("no_agreement")
    if case.rare_missing:
        fired.append("rare_terms_missing")
    if case.coverage is not None and case.coverage < s.min_coverage:
        fired.append("low_coverage")
    if case.best_dense is not None and case.best_dense < s.min_dense_similarity:
        fired.append("low_dense")
    weight = sum(getattr(s, code) for code in fired)
    independent = any(code not in LEXICAL_SIGNALS for code in fired)
    return weight >= s.refuse_at - 1e-9 and independent


@dataclass(frozen=True)
class RefusalRow:
    """A setting's outcome over a set of cases."""

    setting: RefusalSetting
    refused: float | None  # share of unanswerable refused
    false_refusals: float | None  # share of answerable refused
    ndcg: float | None  # answerable nDCG@10 with refused ones counted 0
    r1: float | None
    meets: bool


def _grid_values(defaults: RefusalSetting) -> dict[str, tuple[float, ...]]:
    base = {
        "min_rerank_score": (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6),
        "min_coverage": (0.3, 0.5, 0.7),
        "weak_rerank": (0.5, 1.0, 2.0),
        "no_agreement": (0.0, 0.5, 1.0),
        "rare_terms_missing": (0.5, 1.0, 2.0),
        "low_coverage": (0.0, 0.5, 1.0),
        "refuse_at": (1.0, 1.5, 2.0, 2.5, 3.0),
    }
    # the service's own values are always in the grid, whatever they become
    return {k: tuple(sorted({*v, getattr(defaults, k)})) for k, v in base.items()}


def refusal_settings(defaults: RefusalSetting | None = None) -> list[RefusalSetting]:
    """Every combination of the grid's knob values."""
    values = _grid_values(defaults or policy_setting())
    names = list(values)
    return [
        RefusalSetting(**dict(zip(names, combo, strict=True)))
        for combo in itertools.product(*values.values())
    ]


class _Arrays:
    """The cases as numpy columns, so a setting costs a few vector operations."""

    def __init__(self, cases: Sequence[RefusalCase]) -> None:
        self.n = len(cases)
        self.answerable = np.array([c.answerable for c in cases], dtype=bool)
        self.hard = np.array([c.hard for c in cases], dtype=bool)
        self.best = np.array([np.inf if c.best_score is None else c.best_score for c in cases], dtype=float)
        self.cov = np.array([np.inf if c.coverage is None else c.coverage for c in cases], dtype=float)
        self.no_agree = np.array([c.no_agreement for c in cases], dtype=float)
        self.rare = np.array([c.rare_missing for c in cases], dtype=float)
        self.dense = np.array([np.inf if c.best_dense is None else c.best_dense for c in cases], dtype=float)
        self.ndcg = np.array([c.ndcg for c in cases], dtype=float)
        self.r1 = np.array([c.r1 for c in cases], dtype=float)

    def refuse(self, s: RefusalSetting) -> np.ndarray:
        low_dense = self.dense < s.min_dense_similarity
        weight = (
            (self.best < s.min_rerank_score) * s.weak_rerank
            + self.no_agree * s.no_agreement
            + self.rare * s.rare_terms_missing
            + (self.cov < s.min_coverage) * s.low_coverage
            + low_dense * s.low_dense
        )
        independent = low_dense
        return np.asarray(self.hard | ((weight >= s.refuse_at - 1e-9) & independent), dtype=bool)

    def row(self, s: RefusalSetting, mask: np.ndarray | None = None) -> RefusalRow:
        refuse = self.refuse(s)
        take = np.ones(self.n, dtype=bool) if mask is None else mask
        ans, unans = take & self.answerable, take & ~self.answerable
        refused = float(refuse[unans].mean()) if unans.any() else None
        false = float(refuse[ans].mean()) if ans.any() else None
        kept = ~refuse
        ndcg = float((self.ndcg * kept)[ans].mean()) if ans.any() else None
        r1 = float((self.r1 * kept)[ans].mean()) if ans.any() else None
        meets = (
            refused is not None and false is not None and refused >= TARGET_REFUSED and false <= TARGET_FALSE
        )
        return RefusalRow(s, refused, false, ndcg, r1, meets)


def _changes(s: RefusalSetting, base: RefusalSetting) -> int:
    return sum(getattr(s, k) != getattr(base, k) for k in asdict(base))


def choose(rows: Sequence[RefusalRow], base: RefusalSetting) -> tuple[RefusalRow | None, str]:
    """The best row and the rule that chose it.

    Meeting the target (>= 90 % refused, <= 3 % false): fewest false refusals, then most refused, then
    the best answerable nDCG, then the fewest knobs changed. None meets: the most refused with <= 3 %
    false refusals; none has that few: the largest refused minus false.
    """
    if not rows:
        return None, "no cases"

    def tie(r: RefusalRow) -> tuple[float, int]:
        return (-(r.ndcg or 0.0), _changes(r.setting, base))

    meeting = [r for r in rows if r.meets]
    if meeting:
        best = min(meeting, key=lambda r: (r.false_refusals or 0.0, -(r.refused or 0.0), *tie(r)))
        return best, "meets the target: fewest false refusals, then most refused"
    low_false = [r for r in rows if r.false_refusals is not None and r.false_refusals <= TARGET_FALSE]
    if low_false:
        best = min(low_false, key=lambda r: (-(r.refused or 0.0), r.false_refusals or 0.0, *tie(r)))
        return best, "none meets the target: most refused with <= 3 % false refusals"
    best = min(rows, key=lambda r: (-((r.refused or 0.0) - (r.false_refusals or 0.0)), *tie(r)))
    return best, "none has <= 3 % false refusals: largest refused minus false refusals"


def _row_dict(row: RefusalRow | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "setting": asdict(row.setting),
        "policy": row.setting.as_env(),
        "refused": row.refused,
        "false_refusals": row.false_refusals,
        "ndcg_at_10": row.ndcg,
        "recall_at_1": row.r1,
        "meets": row.meets,
    }


def refusal_grid(
    cases: Sequence[RefusalCase], base: RefusalSetting | None = None, top: int = 10
) -> dict[str, Any]:
    """The grid over every case: the service's setting replayed, the chosen one, the best few, a
    min_rerank_score x refuse_at table around the chosen one, and a two-fold held-out check."""
    base = base or policy_setting()
    arrays = _Arrays(cases)
    settings = refusal_settings(base)
    rows = [arrays.row(s) for s in settings]
    chosen, rule = choose(rows, base)
    replay = arrays.refuse(base)
    recorded = np.array([c.recorded for c in cases], dtype=bool)
    # the others in the chooser's order: those meeting the target first, then the best trade-offs
    shown = {base, chosen.setting if chosen is not None else base}
    ranked = sorted(
        (r for r in rows if r.setting not in shown),
        key=lambda r: (
            not r.meets,
            (r.false_refusals or 0.0) if r.meets else 0.0,
            -((r.refused or 0.0) - (r.false_refusals or 0.0)),
            -(r.ndcg or 0.0),
            _changes(r.setting, base),
        ),
    )
    heat: dict[str, dict[str, list[float | None]]] = {}
    if chosen is not None:
        for m in _grid_values(base)["min_rerank_score"]:
            heat[f"{m:g}"] = {}
            for at in _grid_values(base)["refuse_at"]:
                r = arrays.row(replace(chosen.setting, min_rerank_score=m, refuse_at=at))
                heat[f"{m:g}"][f"{at:g}"] = [r.refused, r.false_refusals]
    holdout = []
    parity = np.arange(arrays.n) % 2
    for fold in (0, 1):
        train, test = parity == fold, parity != fold
        picked, _ = choose([arrays.row(s, train) for s in settings], base)
        if picked is not None:
            got = arrays.row(picked.setting, test)
            holdout.append(
                {
                    "chosen_on": f"half {fold + 1}",
                    "setting": picked.setting.as_env(),
                    "train": [picked.refused, picked.false_refusals],
                    "test": [got.refused, got.false_refusals],
                }
            )
    ans = arrays.answerable
    codes: dict[str, dict[str, int]] = {}
    for c in cases:
        fired = ["hard"] if c.hard else []
        fired += [
            name
            for name, on in (("no_agreement", c.no_agreement), ("rare_terms_missing", c.rare_missing))
            if on
        ]
        for code in fired:
            group = codes.setdefault(code, {"answerable": 0, "unanswerable": 0})
            group["answerable" if c.answerable else "unanswerable"] += 1
    return {
        "cases": {"answerable": int(ans.sum()), "unanswerable": int((~ans).sum())},
        "settings": len(settings),
        "service": _row_dict(arrays.row(base)),
        "replay_agrees": int((replay == recorded).sum()),
        "hard_floor": {
            "answerable_refused_by_hard_reasons": float(arrays.hard[ans].mean()) if ans.any() else None,
            "unanswerable_refused_by_hard_reasons": float(arrays.hard[~ans].mean()) if (~ans).any() else None,
        },
        "fired": codes,
        "chosen": _row_dict(chosen),
        "rule": rule,
        "top": [_row_dict(r) for r in ranked[:top]],
        "heat": heat,
        "holdout": holdout,
    }


# ---- fusion ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FusionCase:
    """One answerable query's channel stage lists, ready for `fuse`."""

    qid: str
    set: str
    relevant: frozenset[str]
    channels: Mapping[str, tuple[Scored, ...]]
    recorded: tuple[str, ...]  # the service's fused list (chunk ids)


def fusion_case(
    qid: str,
    set_name: str,
    relevant: Sequence[str],
    stages: Mapping[str, Sequence[StageItem]],
    prefix_chars: int = FusionSettings().dedupe_prefix_chars,
) -> FusionCase:
    """Candidates rebuilt from the stage items. Each location (file, page, normalised content prefix)
    becomes a short token as the candidate's content, so `fuse` de-duplicates exactly as it would on
    these fields without normalising long texts once per setting."""
    tokens: dict[tuple[str, int | None, str], str] = {}
    made: dict[str, Candidate] = {}
    channels: dict[str, tuple[Scored, ...]] = {}
    for channel in CHANNEL_STAGES:
        scored = []
        for item in stages.get(channel, ()):
            cand = made.get(item.chunk_id)
            if cand is None:
                where = (item.file_id, item.page, normalize(item.content)[:prefix_chars])
                token = tokens.setdefault(where, f"loc{len(tokens)}")
                cand = made[item.chunk_id] = Candidate(
                    chunk_id=item.chunk_id,
                    file_id=item.file_id,
                    content=token,
                    search_text="",
                    place=ChunkPlace(page=item.page),
                )
            scored.append(Scored(cand, item.score if item.score is not None else 0.0))
        channels[channel] = tuple(scored)
    recorded = tuple(i.chunk_id for i in stages.get("fused", ()))
    return FusionCase(qid, set_name, frozenset(relevant), channels, recorded)


def fused_ids(case: FusionCase, config: FusionSettings, k: int) -> list[str]:
    """The top k chunk ids of `fuse` on the case's channel lists."""
    return [f.candidate.chunk_id for f in fuse(case.channels, config)[:k]]


def _files(case: FusionCase, ids: Sequence[str]) -> list[str]:
    by_id = {s.candidate.chunk_id: s.candidate.file_id for hits in case.channels.values() for s in hits}
    return file_ranking(by_id[i] for i in ids if i in by_id)


def _scores(cases: Sequence[FusionCase], config: FusionSettings, k: int) -> dict[str, dict[str, float]]:
    sums: dict[str, list[float]] = {}
    for case in cases:
        ranking = _files(case, fused_ids(case, config, k))
        s = sums.setdefault(case.set, [0.0, 0.0, 0.0])
        s[0] += ndcg_at_k(ranking, set(case.relevant), 10)
        s[1] += recall_at_k(ranking, set(case.relevant), 1)
        s[2] += 1
    return {
        name: {"ndcg_at_10": v[0] / v[2], "recall_at_1": v[1] / v[2], "queries": v[2]}
        for name, v in sums.items()
    }


def fusion_configs(base: FusionSettings | None = None) -> list[FusionSettings]:
    """RRF k x lexical weight x exact weight x exact boost (vector weight 1: only ratios matter)."""
    base = base or FusionSettings()
    ks = sorted({20.0, 60.0, base.rrf_k})
    lexical = sorted({0.5, 1.0, 2.0, base.weights.lexical})
    exact = sorted({0.0, 0.5, 1.0, 2.0, base.weights.exact})
    boosts = sorted({0.0, 1.0, 2.0, base.exact_boost})
    out = []
    for k, wl, we, boost in itertools.product(ks, lexical, exact, boosts):
        weights = ChannelWeights(exact=we, lexical=wl, vector=base.weights.vector)
        out.append(base.model_copy(update={"rrf_k": k, "weights": weights, "exact_boost": boost}))
    return out


def _config_dict(c: FusionSettings) -> dict[str, Any]:
    return {"rrf_k": c.rrf_k, "weights": c.weights.model_dump(), "exact_boost": c.exact_boost}


def fusion_grid(
    cases: Sequence[FusionCase],
    best_channel: Mapping[str, Mapping[str, float]],
    *,
    k: int = 10,
    base: FusionSettings | None = None,
    recorded: Mapping[str, Mapping[str, float]] | None = None,
    top: int = 10,
) -> dict[str, Any]:
    """Every configuration's per-set nDCG@10 and R@1, whether it beats the best single channel on
    every set (`best_channel[set] = {"ndcg_at_10", "recall_at_1"}`), and the replay's fidelity."""
    base = base or FusionSettings()
    same = top1 = 0
    for case in cases:
        ids = fused_ids(case, base, k)
        same += tuple(ids) == case.recorded[:k]
        top1 += bool(ids) and bool(case.recorded) and ids[0] == case.recorded[0]
    rows: list[dict[str, Any]] = []
    for config in fusion_configs(base):
        per_set = _scores(cases, config, k)
        beats = all(
            per_set[name]["ndcg_at_10"] >= best_channel[name]["ndcg_at_10"] - 1e-12
            and per_set[name]["recall_at_1"] >= best_channel[name]["recall_at_1"] - 1e-12
            for name in per_set
            if name in best_channel
        )
        mean = sum(v["ndcg_at_10"] for v in per_set.values()) / max(len(per_set), 1)
        rows.append(
            {"config": _config_dict(config), "sets": per_set, "beats_channels": beats, "mean_ndcg": mean}
        )
    base_dict = _config_dict(base)
    service_row = next((r for r in rows if r["config"] == base_dict), None)
    ranked = sorted(
        (r for r in rows if r is not service_row), key=lambda r: (not r["beats_channels"], -r["mean_ndcg"])
    )
    # ties go to the service's own setting: change nothing without a measured gain
    best_row = (
        min(rows, key=lambda r: (not r["beats_channels"], -r["mean_ndcg"], r is not service_row))
        if rows
        else None
    )
    fidelity: dict[str, Any] = {"cases": len(cases), "same_list": same, "same_top1": top1}
    if recorded is not None and service_row is not None:
        fidelity["ndcg_delta"] = {
            name: service_row["sets"][name]["ndcg_at_10"] - recorded[name]["ndcg_at_10"]
            for name in service_row["sets"]
            if name in recorded
        }
    return {
        "k": k,
        "configs": len(rows),
        "service": service_row,
        "best": best_row,
        "top": ranked[:top],
        "fidelity": fidelity,
        "best_channel": {name: dict(v) for name, v in best_channel.items()},
    }
