"""A tiny GGUF model whose vocabulary is a case's toy tokenizer, built at run time (no weights are downloaded).

llama-cpp-python's high-level loop (``Llama.create_completion``) needs a model: a vocabulary to
detokenize with and a context to decode. :func:`model_path` writes one with the ``gguf``
package (0.19.0, the ``gguf-py`` that llama-cpp-python 0.3.36 vendors under
``vendor/llama.cpp/gguf-py``): architecture ``llama``, one block, ``n_embd`` 16, two heads,
float32 weights drawn from a fixed generator (their logits are never read: a logits
processor replaces them, :mod:`.completion`).

The vocabulary is a SentencePiece one (``tokenizer.ggml.model = "llama"``): token ``i < V``
has the case's text ``vocab[i]`` (type ``NORMAL``, or ``CONTROL`` for a special id, whose
piece is empty when detokenized without ``special``: ``llama_vocab::token_to_piece``,
``src/llama-vocab.cpp`` of the llama.cpp llama-cpp-python 0.3.36 bundles), so
``Llama.detokenize`` gives :meth:`impls.reference.toy_tokenizer.ToyTokenizer.text` for texts
without ``"▁"`` (which SentencePiece pieces turn into a space). Two ``CONTROL`` tokens follow
(:data:`EXTRA`): ``V`` is the BOS (a detokenized sequence starting with BOS loses its leading
space, ``_internals.LlamaModel.detokenize``; no case token is BOS, so nothing is stripped) and
``V + 1`` the EOS of a request without an end id. The EOS id is otherwise the request's
``end_id`` (``tokenizer.ggml.eos_token_id``, which ``llama_vocab_is_eog`` reads).

Models are cached per ``(vocabulary, special ids, EOS id)`` in one temporary directory for the
life of the process.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
from typing import Optional, Sequence

import numpy as np

__all__ = ["EXTRA", "EMBD", "model_path", "token_texts", "text_problem"]

#: The tokens after the case's vocabulary: the BOS, then the EOS of a request without an end id.
EXTRA = ("<sampcheck-bos>", "<sampcheck-eos>")
#: ``n_embd`` of the model (two heads of 8).
EMBD = 16
_CTX = 4096
_DIR: Optional[str] = None
_PATHS: dict = {}


def token_texts(vocab: int, texts: Optional[Sequence[str]] = None) -> tuple:
    """The texts of the case's ``vocab`` tokens: the toy tokenizer's, or ``"<t{i}>"`` without one."""
    if texts is not None:
        if len(texts) != vocab:
            raise ValueError(f"{len(texts)} token texts for a vocabulary of {vocab}")
        return tuple(texts)
    return tuple(f"<t{i}>" for i in range(vocab))


def text_problem(texts: Sequence[str]) -> Optional[str]:
    """Why a SentencePiece vocabulary cannot carry ``texts`` unchanged, or None.

    ``"▁"`` (U+2581) becomes a space in ``token_to_piece``; a piece over 32 bytes overflows the
    32-byte buffer of ``LlamaModel.detokenize`` (``_internals.py``, llama-cpp-python 0.3.36);
    a text equal to one of :data:`EXTRA` would repeat a token.
    """
    for i, t in enumerate(texts):
        if "\u2581" in t:
            return f"token {i}'s text {t!r} holds '\u2581', which a SentencePiece vocabulary detokenizes as a space"
        if len(t.encode("utf-8")) > 32:
            return f"token {i}'s text is over 32 bytes (LlamaModel.detokenize reads pieces into a 32-byte buffer)"
        if t in EXTRA:
            return f"token {i}'s text {t!r} is one the adapter's model reserves"
    return None


def _write(path: str, texts: tuple, special: frozenset, eos: int) -> None:
    from gguf import GGUFWriter, TokenType

    vocab = list(texts) + list(EXTRA)
    nv, heads, ff = len(vocab), 2, EMBD
    bos = len(texts)
    w = GGUFWriter(path, "llama")
    w.add_context_length(_CTX)
    w.add_embedding_length(EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(EMBD // heads)
    w.add_vocab_size(nv)
    w.add_tokenizer_model("llama")
    w.add_token_list(vocab)
    w.add_token_scores([0.0] * nv)
    w.add_token_types([TokenType.CONTROL if (i in special or i >= len(texts)) else TokenType.NORMAL
                       for i in range(nv)])
    w.add_bos_token_id(bos)
    w.add_eos_token_id(int(eos))
    w.add_unk_token_id(bos)
    w.add_pad_token_id(bos)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    rng = np.random.default_rng(0)

    def rand(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    rand("token_embd.weight", nv, EMBD)
    w.add_tensor("output_norm.weight", np.ones(EMBD, np.float32))
    rand("output.weight", nv, EMBD)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(EMBD, np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(EMBD, np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        rand(f"blk.0.{name}.weight", EMBD, EMBD)
    rand("blk.0.ffn_gate.weight", ff, EMBD)
    rand("blk.0.ffn_up.weight", ff, EMBD)
    rand("blk.0.ffn_down.weight", EMBD, ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _cleanup() -> None:
    if _DIR is not None:
        shutil.rmtree(_DIR, ignore_errors=True)


def model_path(texts: Sequence[str], special: frozenset = frozenset(), eos: Optional[int] = None) -> str:
    """The path of a GGUF file whose token ``i`` is ``texts[i]`` (module docstring), written once per process.

    Parameters
    ----------
    texts : sequence of str
        ``(V,)`` the case's token texts (:func:`token_texts`).
    special : frozenset of int
        Ids written as ``CONTROL`` tokens (no text when detokenized).
    eos : int, optional
        The EOS id; None: ``V + 1`` (:data:`EXTRA`), which the model never samples.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        ``eos`` outside ``[0, V)``, or texts :func:`text_problem` refuses.
    """
    global _DIR
    texts = tuple(texts)
    why = text_problem(texts)
    if why:
        raise ValueError(why)
    eos_id = len(texts) + 1 if eos is None else int(eos)
    if not 0 <= eos_id < len(texts) + len(EXTRA):
        raise ValueError(f"EOS id {eos_id} outside [0, {len(texts)})")
    key = (texts, tuple(sorted(int(s) for s in special)), eos_id)
    path = _PATHS.get(key)
    if path is None:
        if _DIR is None:
            _DIR = tempfile.mkdtemp(prefix="sampcheck-gguf-")
            atexit.register(_cleanup)
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        path = os.path.join(_DIR, f"toy-{name}.gguf")
        _write(path, texts, frozenset(int(s) for s in special), eos_id)
        _PATHS[key] = path
    return path
