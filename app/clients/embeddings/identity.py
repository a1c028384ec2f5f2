"""The one identity under which stored vectors are reused, by V1 uploads and V2 index runs alike."""

from __future__ import annotations

from app.config import Settings

# The mark of the local model's windowed vectors. Written "+windows" after the identity: texts past
# the model's 256-token window were cut off before and are pooled windows since, so V1 vectors stored
# under the unmarked name are of another computation and must not be reused.
WINDOWS_REVISION = "+windows"
# The mark of vectors whose texts began with a model-written sentence situating the chunk in its
# document (CONTEXTUAL_CHUNKING_ENABLED), followed by the chat model that wrote them.
CONTEXT_MARK = "+context:"


def vector_revision(provider: str) -> str:
    """A mark for vectors whose computation changed under the same model name ("" for none).

    Part of the identity under which stored vectors are reused on re-upload: the local model's texts
    past its 256-token window were cut off before and are pooled windows now, so its old vectors of
    such chunks must not be reused (those that fit are the same bit for bit, and are recomputed once).
    """
    return WINDOWS_REVISION if provider == "local" else ""


def model_identity(settings: Settings) -> str:
    """The identity under which vectors are reusable: provider, model, forced dimensions, revision.

    `provider:model[@dims][+revision][+context:chat-model]`; V1 records it per file
    (`ragoverlay_files.embedding_model`), V2 per run and document. Two settings with the same
    identity make the same vector of a chunk: with contextual chunking the embedded text starts with
    a situating sentence, so those vectors are never reused as raw ones, nor raw ones as those.
    """
    dims = settings.embeddings_dimensions
    identity = f"{settings.provider}:{settings.model}" + (f"@{dims}" if dims else "")
    identity += vector_revision(settings.provider)
    if settings.contextual_chunking_enabled:
        identity += f"{CONTEXT_MARK}{settings.contextual_chunking_model}"
    return identity


def query_space(identity: str) -> str:
    """The part of an identity a query's vector shares: the embedder, without the context mark.

    A question is embedded raw either way, so it compares with vectors of chunks embedded with or
    without a situating sentence alike; only another embedder makes them incomparable.
    """
    return identity.split(CONTEXT_MARK, 1)[0]
