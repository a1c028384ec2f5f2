"""A /query_v2 result on a page OCR read says so, with that page's confidence; the document's page map
stays out of the answer."""

from __future__ import annotations

from app.evidence.query.evidence import OCR_PAGES, build_evidence, ocr_confidence
from app.evidence.query.records import Candidate, DocumentInfo, Fused
from app.text.chunk_records import ChunkPlace
from tests.unit.v2.helpers import cand, fused

SCAN = DocumentInfo(filename="scan.pdf", metadata={"kind": "pdf", OCR_PAGES: {"2": 0.81, "3": 0.42}})


def _fused(chunk_id: str, page: int | None, document: DocumentInfo = SCAN) -> Fused:
    candidate = Candidate(chunk_id, "f1", "text", "text", place=ChunkPlace(page=page), document=document)
    return Fused(candidate, 0.5, ("lexical",), {"lexical": 1})


def test_each_result_carries_its_own_pages_confidence() -> None:
    items = build_evidence([_fused("a", 2), _fused("b", 3), _fused("c", 1)], {"f1"}, k=3)
    assert [(i.metadata.get("ocr"), i.metadata.get("ocr_confidence")) for i in items] == [
        (True, 0.81),
        (True, 0.42),
        (None, None),  # page 1 had a text layer
    ]
    assert all(OCR_PAGES not in item.metadata and item.metadata["kind"] == "pdf" for item in items)


def test_no_page_or_no_map_means_no_ocr_confidence() -> None:
    assert ocr_confidence({"2": 0.81}, None) is None
    assert ocr_confidence(None, 2) is None
    assert ocr_confidence({"2": "high"}, 2) is None
    (item,) = build_evidence([_fused("a", 2, DocumentInfo(filename="a.md"))], {"f1"}, k=1)
    assert "ocr" not in item.metadata


def test_a_result_names_its_own_chunks_language_else_its_documents() -> None:
    german = cand("c1", content="Die Pumpe wird mit dem Schalter an der Seite eingeschaltet.", language="en")
    row = cand("c2", content="K 28 | 2.8 | 12", kind="table_row", language="de")
    english = cand("c3", content="The pump is switched on with the switch on the side.", language="de")
    results = build_evidence([fused(german, 0.9), fused(row, 0.8), fused(english, 0.7)], ["f1"], 3)
    # a German passage in an English document; a row too short to tell keeps its document's
    assert [r.language for r in results] == ["de", "de", "en"]
