"""The LibreChat overlay (patches/librechat/) driven from node against the real service.

Starts ``scripts/serve`` on embedded defaults, uploads files under several namespaces through
``/embed``, and runs the module (tests/node/e2e_driver.js) with RAG_API_URL pointing at a recording
proxy in front of the service. ``/query_v2`` is the service's own (the V2 Agent's uploads build its
index); asked to, the proxy sends ``/query_v2`` to a path the service does not have, for a genuine
missing-route 404. Against an older service without the route, the proxy still answers ``/query_v2``
itself from ``/query_multiple``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.documents import make_pdf
from tests.fixtures.patience import ceiling, wait_until
from tests.fixtures.serve import SERVE, free_port, serving

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "tests" / "node"
DRIVER = NODE_DIR / "e2e_driver.js"

SECRET = "e2e-overlay-secret-" + uuid.uuid4().hex
ALICE = "user-alice"
MALLORY = "user-mallory"
BOB = "user-bob"  # uses the Agent, uploaded none of its files
ADMIN = "user-e2e-admin"  # reads /v2/status, to wait for the V2 index
AGENT = "agent_e2e_kb"
AGENT_V2 = "agent_e2e_v2"
OTHER_AGENT = "agent_e2e_other"
EMULATED_REFUSAL = "The knowledge base holds no evidence for this question (emulated V2)."
STARTUP_TIMEOUT_S = 300.0

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not SERVE.exists(), reason="scripts/serve is not in this tree"),
    pytest.mark.skipif(shutil.which("node") is None, reason="node (>= 20) is not installed"),
]


def make_token(user_id: str, lifetime_s: int = 300) -> str:
    """An HS256 `{id, iat, exp}` token, as LibreChat signs it."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")

    now = int(time.time())
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64(json.dumps({"id": user_id, "iat": now, "exp": now + lifetime_s}).encode())
    signature = hmac.new(SECRET.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(signature)}"


@dataclass(frozen=True)
class Doc:
    """One uploaded file: its id, owner namespace and a marker word found only in its text."""

    file_id: str
    filename: str
    marker: str
    text: str


PDF_PAGES = (
    "ZXPDFONE. Handbook introduction: this handbook describes the service desk and its opening hours.",
    "ZXPDFTWO. Returns: unopened items may be returned to any store with the receipt.",
    "ZXPDFTHREE. Warranty claims for the espresso machine must be filed within 30 days of the fault.",
)
PDF_QUERY = "Within how many days must an espresso machine warranty claim be filed?"


@dataclass
class Corpus:
    """Files uploaded for the tests, by role."""

    kb_refund: Doc
    kb_onboarding: Doc
    v2_warranty: Doc
    alice_notes: Doc
    mallory_secret: Doc
    other_agent_secret: Doc
    kb_handbook: Doc
    v2_handbook: Doc

    def by_id(self) -> dict[str, Doc]:
        """Every document by file id."""
        docs = [
            self.kb_refund,
            self.kb_onboarding,
            self.v2_warranty,
            self.alice_notes,
            self.mallory_secret,
            self.other_agent_secret,
            self.kb_handbook,
            self.v2_handbook,
        ]
        return {doc.file_id: doc for doc in docs}


@dataclass
class Exchange:
    """One request the module sent through the proxy, and what it got back."""

    path: str
    body: Any
    status: int
    reply: Any
    backend: str  # "service" or "emulated"


@dataclass
class Proxy:
    """A recording reverse proxy in front of the service."""

    url: str
    exchanges: list[Exchange] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    max_in_flight: int = 0
    # Send /query_v2 to a route the service does not have: a real missing-route 404.
    v2_route_missing: bool = False

    def take(self) -> list[Exchange]:
        """Return and clear what was recorded."""
        with self.lock:
            taken = list(self.exchanges)
            self.exchanges.clear()
            self.max_in_flight = 0
        return taken


def emulate_v2(client: httpx.Client, body: dict[str, Any], auth: str) -> tuple[int, Any]:
    """Answer /query_v2 (CONTRACT.md section 6 shape) from the service's /query_multiple."""
    request: dict[str, Any] = {"query": body["query"], "file_ids": body["file_ids"], "k": body.get("k", 8)}
    if body.get("entity_id"):
        request["entity_id"] = body["entity_id"]
    response = client.post("/query_multiple", json=request, headers={"Authorization": auth})
    if response.status_code not in (200, 404):
        return response.status_code, response.json()
    rows = response.json() if response.status_code == 200 else []
    results = []
    for rank, (doc, distance) in enumerate(rows, start=1):
        metadata = doc["metadata"]
        page = metadata.get("page")
        results.append(
            {
                "citation_id": f"V2-{rank}",
                "file_id": metadata["file_id"],
                "filename": metadata.get("source", ""),
                "title": metadata.get("source", ""),
                "content": doc["page_content"],
                "page": page + 1 if isinstance(page, int) else None,
                "section": ["Emulated", "Section"],
                "chunk_kind": "prose",
                "score": 1 - distance,
                "channels": ["dense"],
                "metadata": {},
            }
        )
    return 200, {
        "route": "v2",
        "index_version": "emulated",
        "results": results,
        "degraded": False,
        "safe_refusal": None if results else EMULATED_REFUSAL,
    }


@contextlib.contextmanager
def start_proxy(service_url: str) -> Iterator[Proxy]:
    """Run the proxy on a free loopback port for the duration of the block."""
    client = httpx.Client(base_url=service_url, timeout=ceiling(60.0))
    proxy = Proxy(url="")

    class Handler(BaseHTTPRequestHandler):
        """Forwards each request to the service and records it."""

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

        def do_POST(self) -> None:
            """Forward (or, for a missing /query_v2, emulate) and record."""
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            auth = self.headers.get("Authorization", "")
            body = json.loads(raw) if raw else None
            with proxy.lock:
                proxy.in_flight += 1
                proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
            try:
                missing = self.path == "/query_v2" and proxy.v2_route_missing
                response = client.post(
                    "/query_v2_route_that_does_not_exist" if missing else self.path,
                    content=raw,
                    headers={"Authorization": auth, "Content-Type": self.headers.get("Content-Type", "")},
                )
                status, reply, backend = response.status_code, response.json(), "service"
                route_missing = status == 405 or (status == 404 and reply == {"detail": "Not Found"})
                if self.path == "/query_v2" and route_missing and not missing and isinstance(body, dict):
                    status, reply = emulate_v2(client, body, auth)
                    backend = "emulated"
            finally:
                with proxy.lock:
                    proxy.in_flight -= 1
            with proxy.lock:
                proxy.exchanges.append(Exchange(self.path, body, status, reply, backend))
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        client.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start scripts/serve on embedded defaults and wait for GET /health."""
    data_dir = tmp_path_factory.mktemp("overlay-e2e-data")
    port = free_port()
    env = {
        **os.environ,
        "RAG_HOST": "127.0.0.1",
        "RAG_PORT": str(port),
        "JWT_SECRET": SECRET,
        "DATA_DIR": str(data_dir),
        # V2 for the V2 Agent: its first upload queues the backfill of its index
        "RAG_V2_NAMESPACE_IDS": AGENT_V2,
        "RAG_ADMIN_USER_IDS": ADMIN,
    }
    with serving(env, data_dir / "serve.log", timeout_s=STARTUP_TIMEOUT_S):
        yield f"http://127.0.0.1:{port}"


def upload(service: str, user_id: str, doc: Doc, entity_id: str | None, pdf: Path | None = None) -> None:
    """POST /embed one file (text, or the PDF given) the way LibreChat uploads it."""
    data = {"file_id": doc.file_id}
    if entity_id:
        data["entity_id"] = entity_id
    content = pdf.read_bytes() if pdf else doc.text.encode()
    response = httpx.post(
        f"{service}/embed",
        data=data,
        files={"file": (doc.filename, content, "application/pdf" if pdf else "text/plain")},
        headers={"Authorization": f"Bearer {make_token(user_id)}"},
        timeout=ceiling(120.0),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] is True and body["known_type"] is True, body


def make_doc(stem: str, marker: str, text: str) -> Doc:
    """A document with a fresh file id and its marker word in the text."""
    return Doc(file_id=str(uuid.uuid4()), filename=f"{stem}.txt", marker=marker, text=f"{marker}. {text}\n")


def make_pdf_doc(stem: str, tmp: Path) -> tuple[Doc, Path]:
    """The three-page handbook PDF under a fresh file id."""
    doc = Doc(file_id=str(uuid.uuid4()), filename=f"{stem}.pdf", marker="ZXPDF", text="")
    return doc, make_pdf(tmp / f"{stem}.pdf", PDF_PAGES)


@pytest.fixture(scope="module")
def corpus(service: str, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """Upload the test files under four namespaces: two Agents, Alice, Mallory (and another Agent)."""
    tmp = tmp_path_factory.mktemp("overlay-e2e-docs")
    kb_handbook, kb_pdf = make_pdf_doc("handbook", tmp)
    v2_handbook, v2_pdf = make_pdf_doc("handbook-v2", tmp)
    docs = Corpus(
        kb_refund=make_doc(
            "refund-policy",
            "ZXKBREFUND",
            "Refund policy: customers on annual plans may request a full refund within 45 days of "
            "purchase. Monthly plans are refundable within 14 days.",
        ),
        kb_onboarding=make_doc(
            "onboarding-checklist",
            "ZXKBONBOARD",
            "Onboarding checklist for new employees: collect the badge, set up the laptop, enroll "
            "in payroll and complete security training in the first week.",
        ),
        v2_warranty=make_doc(
            "warranty-terms",
            "ZXVTWOWARRANTY",
            "Warranty terms: hardware is covered for two years against manufacturing defects; "
            "batteries are covered for one year.",
        ),
        alice_notes=make_doc(
            "alice-meeting-notes",
            "ZXALICENOTES",
            "Meeting notes: refund requests from enterprise customers are escalated to the billing "
            "team lead, who answers within two business days.",
        ),
        mallory_secret=make_doc(
            "mallory-private",
            "ZXMALLORYSECRET",
            "Private memo: the refund window for annual plans is secretly 90 days for friends.",
        ),
        other_agent_secret=make_doc(
            "other-agent-private",
            "ZXOTHERAGENTSECRET",
            "Confidential: the refund policy for annual plans grants refunds within 120 days.",
        ),
        kb_handbook=kb_handbook,
        v2_handbook=v2_handbook,
    )
    upload(service, ALICE, docs.kb_refund, AGENT)
    upload(service, ALICE, docs.kb_onboarding, AGENT)
    upload(service, ALICE, docs.v2_warranty, AGENT_V2)
    upload(service, ALICE, docs.alice_notes, None)
    upload(service, MALLORY, docs.mallory_secret, None)
    upload(service, MALLORY, docs.other_agent_secret, OTHER_AGENT)
    upload(service, ALICE, docs.kb_handbook, AGENT, pdf=kb_pdf)
    upload(service, ALICE, docs.v2_handbook, AGENT_V2, pdf=v2_pdf)
    wait_for_v2_index(service, files=2)
    return docs


def wait_for_v2_index(service: str, files: int, seconds: float = 180.0) -> None:
    """Until the V2 Agent's active index run holds its files (its first upload queued the backfill)."""
    headers = {"Authorization": f"Bearer {make_token(ADMIN)}"}

    def active() -> bool:
        reply = httpx.get(f"{service}/v2/status", headers=headers, timeout=ceiling(30.0))
        assert reply.status_code == 200, reply.text
        status = reply.json()
        runs = [run for run in status["active_runs"] if run["namespace"] == AGENT_V2]
        return bool(runs and runs[0]["files"] >= files and not status["running_runs"])

    wait_until(active, what=f"the V2 Agent's active run with {files} files", within_s=seconds, every_s=0.5)


@pytest.fixture(scope="module")
def node_ready() -> None:
    """Install the node suites' dependencies (axios) into tests/node only."""
    result = subprocess.run(
        ["bash", str(NODE_DIR / "run.sh"), "--install-only"],
        capture_output=True,
        text=True,
        timeout=ceiling(300),
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture
def proxy(service: str) -> Iterator[Proxy]:
    """A fresh recording proxy per test."""
    with start_proxy(service) as running:
        yield running


def drive(proxy: Proxy, scenario: dict[str, Any], v2_agents: str = "", **settings: str) -> dict[str, Any]:
    """Run the overlay from node and return its output; `settings` are LibreChat env vars."""
    env = {
        **os.environ,
        "RAG_API_URL": proxy.url,
        "JWT_SECRET": SECRET,
        "RAG_V2_AGENT_IDS": v2_agents,
        **settings,
    }
    result = subprocess.run(
        ["node", str(DRIVER)],
        input=json.dumps(scenario),
        capture_output=True,
        text=True,
        env=env,
        timeout=ceiling(120),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    output: dict[str, Any] = json.loads(result.stdout)
    return output


def entry(doc: Doc, from_agent: bool) -> dict[str, Any]:
    """A primed file as the tool receives it."""
    return {"file_id": doc.file_id, "filename": doc.filename, "fromAgent": from_agent}


def sources_of(output: dict[str, Any]) -> list[dict[str, Any]]:
    """The artifact's sources, or an empty list when there is no artifact."""
    artifact = output["artifact"]
    return artifact["file_search"]["sources"] if artifact else []


def ranking(output: dict[str, Any], corpus: Corpus) -> str:
    """Markers and relevances of the sources, or the text when there are none (failure messages)."""
    docs = corpus.by_id()
    sources = sources_of(output)
    if not sources:
        return f"no sources; text: {output['text'][:300]!r}; errors: {output['axiosErrors']}"
    return ", ".join(
        f"{docs[s['fileId']].marker if s['fileId'] in docs else s['fileId']}={s['relevance']:.3f}"
        for s in sources
    )


def assert_attributed(output: dict[str, Any], corpus: Corpus) -> None:
    """Every source's content carries the marker of the file it is attributed to."""
    docs = corpus.by_id()
    for source in sources_of(output):
        assert source["fileId"] in docs, source["fileId"]
        assert docs[source["fileId"]].marker in source["content"], source


def kb_entries(size: int, placed: dict[int, Doc]) -> list[dict[str, Any]]:
    """A knowledge base of `size` files: the given documents at their positions, unknown ids elsewhere."""
    return [
        entry(placed[i], True)
        if i in placed
        else {"file_id": str(uuid.uuid4()), "filename": f"f{i}.txt", "fromAgent": True}
        for i in range(size)
    ]


REFUND_QUERY = "How many days do customers on annual plans have to request a refund?"


@pytest.mark.usefixtures("node_ready")
def test_knowledge_base_group_with_entity_id_finds_agent_owned_chunks(proxy: Proxy, corpus: Corpus) -> None:
    """Agent-owned files are found through entity_id; the conversation file through the user's token."""
    files = [
        entry(corpus.kb_refund, True),
        entry(corpus.kb_onboarding, True),
        entry(corpus.alice_notes, False),
    ]
    output = drive(proxy, {"userId": ALICE, "entity_id": AGENT, "query": REFUND_QUERY, "files": files})

    exchanges = proxy.take()
    assert [exchange.path for exchange in exchanges] == ["/query_multiple", "/query_multiple"]
    bodies = {("entity_id" in exchange.body): exchange.body for exchange in exchanges}
    assert bodies[True] == {
        "query": REFUND_QUERY,
        "file_ids": [corpus.kb_refund.file_id, corpus.kb_onboarding.file_id],
        "k": 10,
        "entity_id": AGENT,
    }
    assert bodies[False] == {"query": REFUND_QUERY, "file_ids": [corpus.alice_notes.file_id], "k": 10}

    found = [source["fileId"] for source in sources_of(output)]
    assert corpus.kb_refund.file_id in found, ranking(output, corpus)
    assert corpus.alice_notes.file_id in found, ranking(output, corpus)
    # Ranked globally across both groups, whatever the embedding model thinks of each text.
    relevances = [source["relevance"] for source in sources_of(output)]
    assert relevances == sorted(relevances, reverse=True), ranking(output, corpus)
    assert "45 days" in output["text"]
    assert_attributed(output, corpus)


@pytest.mark.usefixtures("node_ready")
def test_knowledge_base_files_are_out_of_scope_without_entity_id(proxy: Proxy, corpus: Corpus) -> None:
    """Without the Agent's entity_id a user's token cannot reach Agent-owned chunks it did not upload."""
    files = [entry(corpus.kb_refund, True), entry(corpus.kb_onboarding, True)]
    output = drive(proxy, {"userId": BOB, "query": REFUND_QUERY, "files": files})
    exchanges = proxy.take()
    assert len(exchanges) == 1
    assert "entity_id" not in exchanges[0].body
    assert output["artifact"] is None
    assert output["text"].startswith("No content found")
    assert corpus.kb_refund.marker not in output["text"]


@pytest.mark.usefixtures("node_ready")
def test_files_of_other_namespaces_never_show(proxy: Proxy, corpus: Corpus) -> None:
    """Mallory's file and another Agent's file stay invisible even when their ids are sent."""
    files = [
        entry(corpus.kb_refund, True),
        entry(corpus.other_agent_secret, True),
        entry(corpus.alice_notes, False),
        entry(corpus.mallory_secret, False),
    ]
    output = drive(proxy, {"userId": ALICE, "entity_id": AGENT, "query": REFUND_QUERY, "files": files})
    assert len(proxy.take()) == 2
    found = {source["fileId"] for source in sources_of(output)}
    assert found, ranking(output, corpus)
    assert found <= {corpus.kb_refund.file_id, corpus.alice_notes.file_id}
    for secret in (corpus.mallory_secret, corpus.other_agent_secret):
        assert secret.marker not in output["text"]
        assert secret.marker not in json.dumps(output["artifact"])
    assert_attributed(output, corpus)


@pytest.mark.usefixtures("node_ready")
def test_primed_files_hide_knowledge_base_names_and_search_both_groups(proxy: Proxy, corpus: Corpus) -> None:
    """primeFiles then search: the note counts the base, names the attachment, and both are searched."""
    kb = [corpus.kb_refund, corpus.kb_onboarding]
    scenario = {
        "userId": ALICE,
        "entity_id": AGENT,
        "query": "What must new employees do in their first week?",
        "prime": {
            "db": [{"file_id": doc.file_id, "filename": doc.filename, "user": ALICE} for doc in kb],
            "tool_resources": {
                "file_search": {
                    "file_ids": [doc.file_id for doc in kb],
                    "files": [
                        {"file_id": corpus.alice_notes.file_id, "filename": corpus.alice_notes.filename}
                    ],
                }
            },
        },
    }
    output = drive(proxy, scenario)
    context = output["toolContext"]
    assert "(2 documents)" in context
    for doc in kb:
        assert doc.filename not in context
    assert json.dumps(corpus.alice_notes.filename) in context
    assert len(proxy.take()) == 2
    assert sources_of(output)[0]["fileId"] == corpus.kb_onboarding.file_id, ranking(output, corpus)
    assert_attributed(output, corpus)


@pytest.mark.usefixtures("node_ready")
def test_text_and_artifact_have_upstream_shape(proxy: Proxy, corpus: Corpus) -> None:
    """Blocks, anchors and sources keep LibreChat's format with real service results."""
    files = [entry(corpus.kb_refund, True), entry(corpus.alice_notes, False)]
    output = drive(
        proxy,
        {"userId": ALICE, "entity_id": AGENT, "query": REFUND_QUERY, "files": files, "fileCitations": True},
    )
    proxy.take()
    sources = sources_of(output)
    blocks = output["text"].split("\n---\n")
    assert len(blocks) == len(sources) >= 2, ranking(output, corpus)
    assert output["artifact"]["file_search"]["fileCitations"] is True
    names = {
        corpus.kb_refund.file_id: corpus.kb_refund.filename,
        corpus.alice_notes.file_id: "alice-meeting-notes.txt",
    }
    for index, (block, source) in enumerate(zip(blocks, sources, strict=True)):
        assert set(source) == {"type", "fileId", "content", "fileName", "relevance", "pages", "pageRelevance"}
        assert source["type"] == "file"
        assert source["fileName"] == names[source["fileId"]]
        assert -1.0 <= source["relevance"] <= 1.0
        assert source["pages"] == [] and source["pageRelevance"] == {}  # text files have no pages
        lines = block.split("\n")
        assert lines[0] == f"File: {source['fileName']}"
        assert lines[1] == f"Anchor: \\ue202turn0file{index} ({source['fileName']})"
        assert lines[2] == f"Relevance: {source['relevance']:.4f}"
        assert block.startswith("\n".join(lines[:3]) + "\nContent: " + source["content"])
    relevances = [source["relevance"] for source in sources]
    assert relevances == sorted(relevances, reverse=True)


@pytest.mark.usefixtures("node_ready")
def test_v2_agent_knowledge_base_goes_to_query_v2(proxy: Proxy, corpus: Corpus) -> None:
    """An allow-listed Agent's base goes to /query_v2 (k 8, no debug); all results rank by relevance."""
    files = [entry(corpus.v2_warranty, True), entry(corpus.alice_notes, False)]
    query = "How long are batteries covered by the warranty?"
    output = drive(proxy, {"userId": ALICE, "entity_id": AGENT_V2, "query": query, "files": files}, AGENT_V2)

    exchanges = {exchange.path: exchange for exchange in proxy.take()}
    assert set(exchanges) == {"/query_v2", "/query_multiple"}
    assert exchanges["/query_v2"].body == {
        "query": query,
        "file_ids": [corpus.v2_warranty.file_id],
        "entity_id": AGENT_V2,
        "k": 8,
        "debug": False,
    }
    assert exchanges["/query_multiple"].body == {
        "query": query,
        "file_ids": [corpus.alice_notes.file_id],
        "k": 10,
    }
    reply = exchanges["/query_v2"].reply
    assert exchanges["/query_v2"].status == 200, reply
    assert exchanges["/query_v2"].backend == "service"  # the service's own V2 index answered
    sources = sources_of(output)
    relevances = [source["relevance"] for source in sources]
    assert relevances == sorted(relevances, reverse=True), ranking(output, corpus)
    assert reply["results"], reply  # "batteries ... one year" is in the warranty file
    first = reply["results"][0]
    assert "batteries are covered for one year" in first["content"]
    blocks = output["text"].split("\n---\n")
    [index] = [i for i, source in enumerate(sources) if source["content"] == first["content"]]
    assert sources[index]["fileId"] == corpus.v2_warranty.file_id, ranking(output, corpus)
    assert blocks[index].startswith(
        f"File: {corpus.v2_warranty.filename}\nCitation: {first['citation_id']}\n"
    )
    assert abs(sources[index]["relevance"] - first["score"]) < 1e-9
    assert_attributed(output, corpus)


@pytest.mark.usefixtures("node_ready")
def test_empty_v2_answer_hands_the_refusal_to_the_model(proxy: Proxy, corpus: Corpus) -> None:
    """When V2 finds nothing in scope, the model reads the reply's safe_refusal sentence."""
    files = [entry(corpus.mallory_secret, True)]  # not Alice's, not the Agent's: nothing in scope
    output = drive(
        proxy, {"userId": ALICE, "entity_id": AGENT_V2, "query": REFUND_QUERY, "files": files}, AGENT_V2
    )
    [exchange] = proxy.take()
    assert exchange.path == "/query_v2"
    assert exchange.status == 200, exchange.reply
    assert exchange.reply["results"] == []
    refusal = exchange.reply["safe_refusal"]
    assert isinstance(refusal, str) and refusal
    assert output["text"] == refusal.strip()
    assert output["artifact"] is None
    assert corpus.mallory_secret.marker not in output["text"]


@pytest.mark.usefixtures("node_ready")
def test_2500_file_knowledge_base_is_searched_in_three_batches_with_one_global_top_k(
    proxy: Proxy, corpus: Corpus, service: str
) -> None:
    """Three requests of at most 1,000 ids, two at a time, merged into the ranking one request gives."""
    placed = {10: corpus.kb_refund, 1500: corpus.kb_onboarding, 2400: corpus.kb_handbook}
    files = kb_entries(2500, placed)
    output = drive(
        proxy,
        {"userId": ALICE, "entity_id": AGENT, "query": REFUND_QUERY, "files": files, "fileCitations": True},
        RAG_FILE_SEARCH_CONCURRENCY="2",
    )
    max_in_flight = proxy.max_in_flight
    exchanges = proxy.take()
    assert [
        len(exchange.body["file_ids"]) for exchange in exchanges if exchange.path == "/query_multiple"
    ] in (
        [1000, 1000, 500],
        [1000, 500, 1000],
        [500, 1000, 1000],
    )
    assert len(exchanges) == 3
    assert sorted(exchange.body["file_ids"][0] for exchange in exchanges) == sorted(
        files[i]["file_id"] for i in (0, 1000, 2000)
    )
    assert all(
        exchange.body["entity_id"] == AGENT and exchange.status in (200, 404) for exchange in exchanges
    )
    assert max_in_flight <= 2

    # The same three real files in one request: the service's own global ranking.
    reference = httpx.post(
        f"{service}/query_multiple",
        json={
            "query": REFUND_QUERY,
            "file_ids": [doc.file_id for doc in placed.values()],
            "k": 10,
            "entity_id": AGENT,
        },
        headers={"Authorization": f"Bearer {make_token(ALICE)}"},
        timeout=ceiling(60.0),
    )
    assert reference.status_code == 200, reference.text
    expected = [(doc["metadata"]["file_id"], doc["page_content"]) for doc, _ in reference.json()]
    got = [(source["fileId"], source["content"]) for source in sources_of(output)]
    assert got == expected, ranking(output, corpus)
    assert {file_id for file_id, _ in got} == {doc.file_id for doc in placed.values()}
    blocks = output["text"].split("\n---\n")
    for index, (block, source) in enumerate(zip(blocks, sources_of(output), strict=True)):
        assert block.startswith(f"File: {source['fileName']}\nAnchor: \\ue202turn0file{index} ")
    assert_attributed(output, corpus)


@pytest.mark.usefixtures("node_ready")
def test_990_knowledge_base_files_and_11_attachments_are_both_searched(proxy: Proxy, corpus: Corpus) -> None:
    """Each half is its own request within the cap: 1,001 files in total are not refused."""
    kb = kb_entries(990, {0: corpus.kb_refund})
    attachments = [entry(corpus.alice_notes, False)] + [
        {"file_id": str(uuid.uuid4()), "filename": f"a{i}.txt", "fromAgent": False} for i in range(10)
    ]
    output = drive(
        proxy, {"userId": ALICE, "entity_id": AGENT, "query": REFUND_QUERY, "files": kb + attachments}
    )
    exchanges = proxy.take()
    assert sorted(len(exchange.body["file_ids"]) for exchange in exchanges) == [11, 990]
    assert all(exchange.status == 200 for exchange in exchanges), [e.reply for e in exchanges]
    found = {source["fileId"] for source in sources_of(output)}
    assert found == {corpus.kb_refund.file_id, corpus.alice_notes.file_id}, ranking(output, corpus)
    assert "could not" not in output["text"]


@pytest.mark.usefixtures("node_ready")
def test_404_from_query_v2_is_logged_with_the_route_and_reported(proxy: Proxy, corpus: Corpus) -> None:
    """A service without /query_v2: the model learns the knowledge base was not searched."""
    proxy.v2_route_missing = True
    files = [entry(corpus.v2_warranty, True), entry(corpus.alice_notes, False)]
    output = drive(
        proxy, {"userId": ALICE, "entity_id": AGENT_V2, "query": REFUND_QUERY, "files": files}, AGENT_V2
    )
    exchanges = {exchange.path: exchange for exchange in proxy.take()}
    assert exchanges["/query_v2"].status == 404
    assert output["text"].startswith("The knowledge base could not be searched: configuration problem.")
    assert "The results below do not come from the knowledge base." in output["text"]
    assert [source["fileId"] for source in sources_of(output)] == [corpus.alice_notes.file_id]
    [error] = output["axiosErrors"]
    assert error["status"] == 404
    assert "/query_v2" in error["message"] and "configuration problem" in error["message"]


@pytest.mark.usefixtures("node_ready")
def test_v2_refusal_reaches_the_model_next_to_attachment_results(proxy: Proxy, corpus: Corpus) -> None:
    """Nothing in the V2 knowledge base is in scope: its refusal is said, attachment results follow."""
    files = [entry(corpus.mallory_secret, True), entry(corpus.alice_notes, False)]
    output = drive(
        proxy, {"userId": ALICE, "entity_id": AGENT_V2, "query": REFUND_QUERY, "files": files}, AGENT_V2
    )
    exchanges = {exchange.path: exchange for exchange in proxy.take()}
    refusal = exchanges["/query_v2"].reply["safe_refusal"]
    assert exchanges["/query_v2"].reply["results"] == []
    notes, *blocks = output["text"].split("\n---\n")
    assert notes == (
        "The knowledge base was searched and holds no evidence for this query. The search service says: "
        f"{refusal.strip()} Do not answer this query from the knowledge base.\n"
        "The results below do not come from the knowledge base."
    )
    assert blocks and all(block.startswith(f"File: {corpus.alice_notes.filename}\n") for block in blocks)
    assert {source["fileId"] for source in sources_of(output)} == {corpus.alice_notes.file_id}
    assert corpus.mallory_secret.marker not in output["text"]


@pytest.mark.usefixtures("node_ready")
def test_wrong_jwt_secret_is_a_configuration_problem(proxy: Proxy, corpus: Corpus) -> None:
    """The service answers 401: the model is told it is a configuration problem, the log names JWT_SECRET."""
    files = [entry(corpus.kb_refund, True), entry(corpus.alice_notes, False)]
    output = drive(
        proxy,
        {"userId": ALICE, "entity_id": AGENT, "query": REFUND_QUERY, "files": files},
        JWT_SECRET="not-the-service-secret",
    )
    assert [exchange.status for exchange in proxy.take()] == [401, 401]
    assert output["artifact"] is None
    lines = output["text"].split("\n")
    assert lines[0].startswith("The knowledge base could not be searched: configuration problem.")
    assert lines[1].startswith("The attached files could not be searched: configuration problem.")
    assert "try again" not in output["text"]
    assert all("JWT_SECRET" in error["message"] for error in output["axiosErrors"])


@pytest.mark.usefixtures("node_ready")
def test_files_without_from_agent_are_searched_without_entity_id(proxy: Proxy, corpus: Corpus) -> None:
    """Upstream's safe default: an unflagged file never widens the search to the Agent's namespace."""
    files = [{"file_id": corpus.kb_refund.file_id, "filename": corpus.kb_refund.filename}]
    # Bob uses the Agent but uploaded none of its files (an uploader may read its own uploads)
    output = drive(proxy, {"userId": BOB, "entity_id": AGENT, "query": REFUND_QUERY, "files": files})
    [exchange] = proxy.take()
    assert "entity_id" not in exchange.body
    assert output["artifact"] is None  # the chunks belong to the Agent, so Bob's own scope has none
    assert corpus.kb_refund.marker not in output["text"]


@pytest.mark.usefixtures("node_ready")
def test_pdf_pages_use_librechats_numbering_on_both_routes(proxy: Proxy, corpus: Corpus) -> None:
    """One page gives one artifact page via /query_multiple (0-based) and /query_v2 (1-based)."""
    v1 = drive(
        proxy,
        {"userId": ALICE, "entity_id": AGENT, "query": PDF_QUERY, "files": [entry(corpus.kb_handbook, True)]},
    )
    v2 = drive(
        proxy,
        {
            "userId": ALICE,
            "entity_id": AGENT_V2,
            "query": PDF_QUERY,
            "files": [entry(corpus.v2_handbook, True)],
        },
        AGENT_V2,
    )
    paths = [exchange.path for exchange in proxy.take()]
    assert paths == ["/query_multiple", "/query_v2"]

    def pages_by_marker(output: dict[str, Any]) -> dict[str, list[int]]:
        return {
            marker: source["pages"]
            for source in sources_of(output)
            for marker in ("ZXPDFONE", "ZXPDFTWO", "ZXPDFTHREE")
            if marker in source["content"]
        }

    v1_pages = pages_by_marker(v1)
    # rag_api stores the 0-based page; the overlay's artifact shows the printed one, the first page too
    assert v1_pages.get("ZXPDFTHREE") == [3], ranking(v1, corpus)
    assert v1_pages.get("ZXPDFONE", [1]) == [1]
    v2_pages = pages_by_marker(v2)
    if sources_of(v2):
        assert v2_pages == {marker: v1_pages[marker] for marker in v2_pages}, (v1_pages, v2_pages)
        assert "ZXPDFTHREE" in v2_pages
        three = next(block for block in v2["text"].split("\n---\n") if "ZXPDFTHREE" in block)
        assert "\nPage: 3\n" in three  # the model reads the 1-based page in the file
