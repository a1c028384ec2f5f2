"""The local ONNX cross-encoder, on a tiny model and tokenizer this test builds (no download)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from app.errors import ConfigError
from app.evidence.query.analysis import analyze_query
from app.evidence.query.rerank import rerank_window
from app.evidence.query.rerank_onnx import OnnxCrossEncoder
from tests.unit.v2.helpers import cand, fused

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

VOCAB = {
    "[PAD]": 0,
    "[UNK]": 1,
    "[CLS]": 2,
    "[SEP]": 3,
    "relevant": 4,
    "irrelevant": 5,
    "text": 6,
    "query": 7,
}


def build_model(folder: Path, *, two_classes: bool = False) -> None:
    """A cross-encoder whose logit is the sum of per-token weights over the document's tokens.

    weight("relevant") = 2.5, weight("irrelevant") = -2.5, others 0; only tokens with
    token_type_id 1 (the second text of the pair) and attention 1 count.
    """
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    tokenizer = Tokenizer(WordLevel(VOCAB, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    tokenizer.save(str(folder / "tokenizer.json"))

    weights = np.zeros((len(VOCAB), 1), dtype=np.float32)
    weights[VOCAB["relevant"]] = 2.5
    weights[VOCAB["irrelevant"]] = -2.5
    nodes = [
        helper.make_node("Gather", ["W", "input_ids"], ["per_token"]),  # (n, L, 1)
        helper.make_node("Mul", ["attention_mask", "token_type_ids"], ["second"]),
        helper.make_node("Cast", ["second"], ["second_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["second_f", "axis2"], ["mask3"]),  # (n, L, 1)
        helper.make_node("Mul", ["per_token", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["logit"], keepdims=0),  # (n, 1)
    ]
    output = "logit"
    if two_classes:
        # [-logit, logit]: softmax of the second class = sigmoid(2 * logit)
        nodes.append(helper.make_node("Neg", ["logit"], ["negative"]))
        nodes.append(helper.make_node("Concat", ["negative", "logit"], ["logits2"], axis=1))
        output = "logits2"
    graph = helper.make_graph(
        nodes,
        "tiny_cross_encoder",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, ["n", "L"])
            for name in ("input_ids", "attention_mask", "token_type_ids")
        ],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["n", 2 if two_classes else 1])],
        initializer=[
            helper.make_tensor("W", TensorProto.FLOAT, weights.shape, weights.flatten().tolist()),
            helper.make_tensor("axis1", TensorProto.INT64, [1], [1]),
            helper.make_tensor("axis2", TensorProto.INT64, [1], [2]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_scores_are_the_sigmoid_of_the_document_side_logit(tmp_path: Path) -> None:
    build_model(tmp_path)
    encoder = OnnxCrossEncoder(tmp_path)
    # "relevant text": 2.5; "irrelevant relevant text": 0; "relevant relevant": 5.0. The query's own
    # "relevant" (first text, type 0) never counts, and padding (attention 0) adds nothing.
    scores = encoder.score_texts(
        "relevant query", ["relevant text", "irrelevant relevant text", "relevant relevant"]
    )
    assert scores == pytest.approx([sigmoid(2.5), 0.5, sigmoid(5.0)], abs=1e-6)


def test_two_class_logits_use_the_second_class(tmp_path: Path) -> None:
    build_model(tmp_path, two_classes=True)
    # softmax([-2.5, 2.5])[1] = sigmoid(5)
    assert OnnxCrossEncoder(tmp_path).score_texts("q", ["relevant"]) == pytest.approx(
        [sigmoid(5.0)], abs=1e-6
    )


async def test_it_reranks_a_window(tmp_path: Path) -> None:
    build_model(tmp_path)
    items = [fused(cand("a", content="irrelevant text"), 0.9), fused(cand("b", content="relevant text"), 0.1)]
    outcome = await rerank_window(analyze_query("query"), items, OnnxCrossEncoder(tmp_path))
    assert outcome.reranker == "onnx" and outcome.fallback_reason is None
    assert [f.candidate.chunk_id for f in outcome.items] == ["b", "a"]


async def test_a_missing_folder_is_a_config_error_and_the_window_falls_back(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        OnnxCrossEncoder(tmp_path / "missing").load()
    items = [fused(cand("a"), 0.9)]
    outcome = await rerank_window(analyze_query("q"), items, OnnxCrossEncoder(tmp_path / "missing"))
    assert outcome.reranker == "features" and outcome.fallback_reason == "ConfigError"
