"""A probe (one request and the rule its answer must follow), the rules, and sending probes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

Check = Callable[[httpx.Response], str | None]


@dataclass
class Probe:
    """One request and the rule its answer must follow."""

    kind: str
    description: str
    method: str
    path: str
    check: Check
    json_body: Any = None
    params: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ProbeResult:
    """A probe's outcome: `error` is None when it passed."""

    kind: str
    description: str
    error: str | None
    status: int | None = None


def _result_file_ids(body: Any) -> tuple[list[str], list[str]]:
    """File ids and owners of every result in a /query, /query_multiple, /documents or /ids answer."""
    files: list[str] = []
    owners: list[str] = []
    if not isinstance(body, list):
        return files, owners
    for item in body:
        doc = item[0] if isinstance(item, list) and item else item
        if isinstance(doc, str):  # /ids lists bare file ids
            files.append(doc)
            continue
        meta = doc.get("metadata") if isinstance(doc, Mapping) else None
        if isinstance(meta, Mapping):
            files.append(str(meta.get("file_id")))
            if meta.get("user_id") is not None:
                owners.append(str(meta.get("user_id")))
    return files, owners


def read_json(response: httpx.Response) -> Any:
    """The answer's JSON body, or None when it has none."""
    try:
        return response.json()
    except ValueError:
        return None


def nothing_foreign(allowed_files: set[str], allowed_owners: set[str], *, refusal_ok: bool = True) -> Check:
    """Pass on a refusal (400/403/404/422) or an answer holding only allowed files and owners.

    401 fails: a probe whose token was refused proves nothing about isolation.
    """

    def check(response: httpx.Response) -> str | None:
        status = response.status_code
        if status in (400, 403, 404, 422):
            return None if refusal_ok else f"refused with {status}"
        if status != 200:
            return f"unexpected HTTP {status}"
        files, owners = _result_file_ids(read_json(response))
        foreign = sorted({f for f in files if f not in allowed_files})
        strangers = sorted({o for o in owners if o not in allowed_owners})
        if foreign:
            return f"returned foreign file(s) {', '.join(foreign[:5])}"
        if strangers:
            return f"returned chunks owned by {', '.join(strangers[:5])}"
        return None

    return check


def refused(*statuses: int) -> Check:
    """Pass only on one of these statuses."""

    def check(response: httpx.Response) -> str | None:
        if response.status_code in statuses:
            return None
        return f"HTTP {response.status_code}, expected {' or '.join(map(str, statuses))}"

    return check


def reaches(own_files: set[str]) -> Check:
    """A positive control: 200 with at least one result, all from the namespace's own files."""

    def check(response: httpx.Response) -> str | None:
        if response.status_code != 200:
            return f"HTTP {response.status_code}; the namespace cannot read its own files"
        files, _ = _result_file_ids(read_json(response))
        if not files:
            return "no results from the namespace's own files"
        foreign = sorted(set(files) - own_files)
        return f"returned foreign file(s) {', '.join(foreign[:5])}" if foreign else None

    return check


def grounded(expect_file: str, expect_text: str) -> Check:
    """The expected file is among the results and one of its chunks contains the expected text."""
    wanted = expect_text.casefold()

    def check(response: httpx.Response) -> str | None:
        if response.status_code != 200:
            return f"HTTP {response.status_code}"
        body = read_json(response) or []
        docs = [item[0] for item in body if isinstance(item, list) and item and isinstance(item[0], Mapping)]
        from_file = [d for d in docs if (d.get("metadata") or {}).get("file_id") == expect_file]
        if not from_file:
            got = sorted({str((d.get("metadata") or {}).get("file_id")) for d in docs})
            return f"{expect_file} not among the results ({', '.join(got) or 'none'})"
        if not any(wanted in str(d.get("page_content", "")).casefold() for d in from_file):
            return f"no chunk of {expect_file} contains {expect_text!r}"
        return None

    return check


def v2_safe_refusal(allowed_files: set[str]) -> Check:
    """/query_v2 answered 200 with no results, nothing foreign, and the safe refusal sentence."""

    def check(response: httpx.Response) -> str | None:
        if response.status_code != 200:
            detail = (
                (read_json(response) or {}).get("detail")
                if isinstance(read_json(response), Mapping)
                else None
            )
            return f"HTTP {response.status_code}" + (f": {detail}" if detail else "")
        body = read_json(response)
        if not isinstance(body, Mapping) or body.get("route") != "v2":
            return "not a V2 answer (no route: 'v2')"
        results = body.get("results")
        if not isinstance(results, list):
            return "`results` is not a list"
        foreign = sorted({str(r.get("file_id")) for r in results if isinstance(r, Mapping)} - allowed_files)
        if foreign:
            return f"returned foreign file(s) {', '.join(foreign[:5])}"
        if results:
            return f"{len(results)} result(s) for a question nothing answers; expected the safe refusal"
        refusal = body.get("safe_refusal")
        if not isinstance(refusal, str) or not refusal.strip():
            return "no `safe_refusal` sentence with empty results"
        return None

    return check


def run_probes(client: httpx.Client, probes: Sequence[Probe], *, concurrency: int) -> list[ProbeResult]:
    """Send every probe (a few at a time) and apply its check."""

    def one(probe: Probe) -> ProbeResult:
        try:
            response = client.request(
                probe.method, probe.path, json=probe.json_body, params=probe.params, headers=probe.headers
            )
        except httpx.HTTPError as exc:
            return ProbeResult(probe.kind, probe.description, f"request failed: {type(exc).__name__}")
        try:
            error = probe.check(response)
        except Exception as exc:  # a malformed answer is a failed probe, not a crash
            error = f"unreadable answer: {type(exc).__name__}"
        return ProbeResult(probe.kind, probe.description, error, response.status_code)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(one, probes))
