"""all-MiniLM-L6-v2 on onnxruntime with int8 weights: the model of :class:`~citerag.index.embed.SentenceTransformerEmbedder`,
faster than torch on CPUs with int8 dot products (AVX512-VNNI); the documentation's performance page has the
measured speed, its retrieval page the quality.

The int8 model is made locally from the packaged torch weights (:func:`export_int8`), once, in five steps:

1. :func:`export_fp32`: ``torch.onnx.export`` of the Hugging Face ``BertModel`` with eager attention (the pattern
   onnxruntime fuses), output ``last_hidden_state``, float32, shape ``(batch, sequence, 384)``;
2. :func:`fuse`: onnxruntime's transformer optimizer fuses attention, GELU and the embedding layer norm
   (``model_type="bert"``), but not residual-add + layer norm: onnxruntime 1.32's ``SkipLayerNormalization`` CPU
   kernel took 230 us where ``Add`` + ``LayerNormalization`` take 50 us on one (1, 115, 384) activation, 12 times a
   passage; the session keeps it unfused too (:data:`DISABLED_OPTIMIZERS`). Passages/s +16 % (13.2 -> 11.1 ms a
   passage on one core);
3. :func:`quantize`: ``onnxruntime.quantization.quantize_dynamic``: int8 weights per output channel, activations
   quantized per forward pass at run time; only ``MatMul`` and ``Attention`` (the word-embedding table stays
   float32);
4. :func:`validate`: the int8 model's vectors of four probe sentences against the torch model's (refused below
   :data:`MIN_PROBE_COSINE`);
5. :func:`install`: renamed into place.

Pooling is sentence-transformers' (``models.Pooling`` mean over the attention mask, clamped at 1e-9, then
``models.Normalize``), so the vectors are comparable with the torch model's: cosine similarity 0.995 on average and
0.988 at least over SciFact's 22,562 passages (a float32 export: 1.000).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: Bumped whenever :func:`export_int8` changes what it writes, so cached exports are remade.
#: 2: residual-add + layer norm left unfused (see the module docstring).
RECIPE_VERSION = 2
#: onnxruntime graph rewrites the session must not apply: ``SkipLayerNormFusion`` would undo the export's choice.
DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]
#: Below this cosine similarity to the torch model on :data:`_PROBES`, an export is refused (a broken exporter or
#: quantizer would otherwise index garbage silently). Measured: 0.991 on these probes, 0.988 at least over SciFact.
MIN_PROBE_COSINE = 0.97
_PROBES = [
    "FrostVault: a cache eviction method for long-context language models.",
    "Mean pooling over the attention mask followed by L2 normalisation.",
    "The tumour suppressor p53 regulates apoptosis in response to DNA damage.",
    "Gradient descent converges at a rate of O(1/t) for smooth convex functions.",
]


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class FastTokenizer:
    """The model's fast tokenizer (``tokenizer.json``) through the ``tokenizers`` library alone, encoding single
    texts as transformers' ``PreTrainedTokenizerFast`` does (``[CLS] ... [SEP]`` from the file's post-processor,
    ``token_type_ids`` 0, truncation to ``max_length``, padding with the pad token to the batch's longest), without
    importing transformers and torch (about 4 s of a service start). ``tests/index/test_embed_onnx.py`` compares its
    ids and masks with ``AutoTokenizer``'s.

    Args:
        path: the ``tokenizer.json`` file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer file at {path}")
        self.backend_tokenizer = Tokenizer.from_file(str(path))
        self.backend_tokenizer.no_truncation()  # the file's own settings (truncate at 128, pad to 128) are not used
        self.backend_tokenizer.no_padding()
        self.pad_id = self.backend_tokenizer.token_to_id("[PAD]") or 0
        self._truncating: dict[int, Tokenizer] = {}  # max_length -> a configured copy (settings are per object)

    def _with_truncation(self, max_length: int):  # noqa: ANN202 - a tokenizers.Tokenizer
        tokenizer = self._truncating.get(max_length)
        if tokenizer is None:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_str(self.backend_tokenizer.to_str())
            tokenizer.enable_truncation(max_length)
            self._truncating[max_length] = tokenizer  # a race builds two equal copies; either is right
        return tokenizer

    def __call__(
        self,
        texts: str | list[str],
        *,
        padding: bool = False,
        truncation: bool = False,
        max_length: int | None = None,
        add_special_tokens: bool = True,
        return_tensors: str | None = None,
        verbose: bool = True,  # noqa: ARG002 - accepted as transformers' tokenizers accept it
    ) -> dict[str, Any]:
        """``{"input_ids", "token_type_ids", "attention_mask"}``: lists of int per text (a single text: one list),
        or int64 arrays of shape ``(batch, longest)`` when ``return_tensors="np"`` (which needs ``padding`` for
        texts of different lengths).

        Raises:
            ValueError: ``return_tensors`` other than ``None`` or ``"np"``, or unpadded texts of unequal length.
        """
        single = isinstance(texts, str)
        batch = [texts] if single else list(texts)
        tokenizer = self._with_truncation(max_length) if truncation and max_length else self.backend_tokenizer
        ids = [encoding.ids for encoding in tokenizer.encode_batch(batch, add_special_tokens=add_special_tokens)]
        if return_tensors is None and not padding:
            rows = {"input_ids": ids, "token_type_ids": [[0] * len(i) for i in ids],
                    "attention_mask": [[1] * len(i) for i in ids]}
            return {key: value[0] for key, value in rows.items()} if single else rows
        if return_tensors not in (None, "np"):
            raise ValueError(f"return_tensors must be None or 'np', got {return_tensors!r}")
        longest = max((len(i) for i in ids), default=0)
        if not padding and any(len(i) != longest for i in ids):
            raise ValueError("texts of different lengths need padding=True")
        input_ids = np.full((len(ids), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(ids), longest), dtype=np.int64)
        for row, row_ids in enumerate(ids):
            input_ids[row, : len(row_ids)] = row_ids
            mask[row, : len(row_ids)] = 1
        arrays = {"input_ids": input_ids, "token_type_ids": np.zeros_like(input_ids), "attention_mask": mask}
        if return_tensors == "np":
            return arrays
        return {key: value.tolist() for key, value in arrays.items()}


class OnnxEmbedder:
    """An ONNX BERT-style encoder plus sentence-transformers mean pooling and L2 normalisation, on the CPU.

    Args:
        model_path: an ONNX file with inputs ``input_ids``, ``attention_mask`` (and optionally ``token_type_ids``),
            int64 ``(batch, sequence)``, and first output ``last_hidden_state``, float32 ``(batch, sequence, dim)``.
        tokenizer_dir: directory of the model's Hugging Face tokenizer (the packaged all-MiniLM-L6-v2's).
        name: model name recorded in the index manifest; it names the backend too (``all-MiniLM-L6-v2+onnx-int8``),
            so an index is never searched with another backend's query vectors.
        max_seq_length: truncation limit in word pieces, special tokens included (256 for all-MiniLM-L6-v2, from
            its ``sentence_bert_config.json``).
        batch_size: texts per forward pass (longest first, so batches pad little). The default, 1, makes a text's
            vector independent of the other texts: activations are quantized per forward pass, so in a batch of 32
            a vector moves by up to 0.01 in cosine with its batch-mates. It was also the fastest on 2 cores
            (~128-piece passages: 1 > 4 > 8 > 32 passages/s; no padding, smaller working set).
        workers: forward passes run at once, each on one core (one onnxruntime intra-op thread; ``session.run``
            releases the GIL and is thread-safe); 0 = every core this process may use. Data parallelism beats
            splitting one small pass over cores (measured on 2 cores: the performance page, "Embedding").
            A single text (a query) runs as one pass on one core.

    Attributes:
        dim: embedding dimension (384), read from the model's output shape.
        tokenizer: the model's :class:`FastTokenizer` (the chunker sizes passages with it).

    Raises:
        ValueError: the ONNX file does not have the inputs/outputs described above.
    """

    def __init__(
        self,
        model_path: Path,
        tokenizer_dir: Path,
        name: str = "all-MiniLM-L6-v2+onnx-int8",
        max_seq_length: int = 256,
        batch_size: int = 1,
        workers: int = 0,
    ) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # parallelism comes from concurrent runs (``workers``)
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(
            str(model_path), options, providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_OPTIMIZERS
        )
        self._inputs = [i.name for i in self.session.get_inputs()]
        if not {"input_ids", "attention_mask"} <= set(self._inputs):
            raise ValueError(f"{model_path}: expected inputs input_ids and attention_mask, found {self._inputs}")
        dim = self.session.get_outputs()[0].shape[-1]
        if not isinstance(dim, int):
            raise ValueError(f"{model_path}: the first output's last dimension is not fixed ({dim!r})")
        self.dim: int = dim
        self.tokenizer = FastTokenizer(tokenizer_dir / "tokenizer.json")
        self.name = name
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.workers = workers or _available_cores()

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        """Embed ``texts`` (``show_progress`` is accepted for the :class:`~citerag.index.embed.Embedder` protocol and ignored:
        the index build shows its own bar).

        Returns:
            float32 array, shape ``(len(texts), dim)``, rows L2-normalised (inner product == cosine), in input order.

        >>> OnnxEmbedder(path, embedding_model_dir()).encode(["FrostVault"]).shape  # doctest: +SKIP
        (1, 384)
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]

        def encode_rows(rows: list[int]) -> None:
            out[rows] = self._encode_batch([texts[i] for i in rows])

        if self.workers == 1 or len(batches) == 1:
            for rows in batches:
                encode_rows(rows)
        else:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="onnx-embed") as pool:
                for _ in pool.map(encode_rows, batches):  # re-raises a worker's exception here
                    pass
        return out

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        encoded = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_seq_length, return_tensors="np"
        )
        feeds = {name: encoded[name].astype(np.int64) for name in self._inputs}
        hidden = self.session.run(None, feeds)[0]
        return mean_pool_normalise(hidden, encoded["attention_mask"])


def mean_pool_normalise(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' mean pooling + ``Normalize``: the mean of the token vectors where ``attention_mask`` is 1
    (the count clamped at 1e-9, as ``models.Pooling`` does), then divided by its L2 norm (clamped at 1e-12, as
    ``torch.nn.functional.normalize``).

    Args:
        hidden: float32, shape ``(batch, sequence, dim)``.
        attention_mask: 0/1 integers, shape ``(batch, sequence)``.

    Returns:
        float32, shape ``(batch, dim)``, rows of unit length.
    """
    mask = attention_mask.astype(np.float32)[:, :, None]
    pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
    norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(pooled / norms, dtype=np.float32)


def export_int8(model_dir: Path, target: Path) -> dict[str, object]:
    """Make the int8 ONNX model of the sentence-transformers BERT model in ``model_dir`` (recipe in the module
    docstring) and write it to ``target`` atomically. Takes about 20 s on 2 cores. The steps, each a function:
    :func:`export_fp32`, :func:`fuse`, :func:`quantize`, :func:`validate`, :func:`install`; the intermediate files
    stay in a temporary directory beside ``target``.

    Returns:
        What was made: recipe version, fused operator counts, and the minimum cosine similarity to the torch model
        on four probe sentences.

    Raises:
        ValueError: the exported model's vectors disagree with the torch model's (minimum cosine similarity below
            :data:`MIN_PROBE_COSINE`); nothing is written.
    """
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager", local_files_only=True).eval()
    want = _torch_vectors(model, tokenizer)  # before the export, which leaves the module changed (cosine 0.93)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".export-") as tmp:
        fp32, fused, int8 = Path(tmp, "fp32.onnx"), Path(tmp, "fused.onnx"), Path(tmp, "int8.onnx")
        export_fp32(model, tokenizer, fp32)
        fusions = fuse(fp32, fused, model.config.num_attention_heads, model.config.hidden_size)
        quantize(fused, int8)
        min_cosine = validate(int8, tokenizer, want, model_dir)
        install(int8, target)
    info = {"recipe": RECIPE_VERSION, "fusions": fusions, "probe_min_cosine": round(min_cosine, 5)}
    log.info("exported %s to %s: %s", model_dir, target, json.dumps(info))
    return info


#: The BERT inputs of the exported graph, in the order ``torch.onnx.export`` passes them.
_INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def _torch_vectors(model: Any, tokenizer: Any) -> np.ndarray:
    """The torch model's sentence vectors of :data:`_PROBES` (float32, ``(4, dim)``, unit rows): what
    :func:`validate` holds the export to."""
    import torch

    with torch.no_grad():
        hidden = model(**tokenizer(_PROBES, padding=True, return_tensors="pt")).last_hidden_state.numpy()
    return mean_pool_normalise(hidden, tokenizer(_PROBES, padding=True, return_tensors="np")["attention_mask"])


def export_fp32(model: Any, tokenizer: Any, path: Path) -> None:
    """Step 1: ``torch.onnx.export`` of the Hugging Face ``BertModel`` ``model`` (eager attention) to ``path``:
    inputs :data:`_INPUTS`, int64 ``(batch, sequence)``; output ``last_hidden_state``, float32
    ``(batch, sequence, hidden)``; batch and sequence dynamic, opset 17."""
    import torch

    class _LastHiddenState(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001, ANN201 - traced by torch.onnx
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = tokenizer(_PROBES[:2], padding=True, return_tensors="pt")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes: expected here
        torch.onnx.export(
            _LastHiddenState(model),
            tuple(sample[n] for n in _INPUTS),
            str(path),
            input_names=_INPUTS,
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*_INPUTS, "last_hidden_state"]},
            opset_version=17,
            dynamo=False,  # the TorchScript exporter: the dynamo one needs onnxscript, which is not installed
        )


@contextmanager
def _quiet_onnxruntime_tools() -> Iterator[None]:
    """The optimizer logs each fusion at INFO and ``quantize_dynamic`` a WARNING hint: silenced while they run."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def fuse(source: Path, path: Path, num_heads: int, hidden_size: int) -> dict[str, int]:
    """Step 2: onnxruntime's transformer optimizer over ``source`` (``model_type="bert"``, basic passes then the
    fusions of attention, GELU and the embedding layer norm; residual-add + layer norm left unfused, see the module
    docstring), written to ``path``.

    Returns:
        The fused operators and how many of each (those with a count).
    """
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    fusion_options = FusionOptions("bert")
    fusion_options.enable_skip_layer_norm = fusion_options.enable_bias_skip_layer_norm = False
    with _quiet_onnxruntime_tools():
        optimized = optimizer.optimize_model(  # opt_level=1: onnxruntime's basic passes, then the fusions
            str(source),
            model_type="bert",
            num_heads=num_heads,
            hidden_size=hidden_size,
            opt_level=1,
            optimization_options=fusion_options,
        )
        fusions = {op: n for op, n in optimized.get_fused_operator_statistics().items() if n}
        optimized.save_model_to_file(str(path))
    return fusions


def quantize(source: Path, path: Path) -> None:
    """Step 3: ``quantize_dynamic`` of ``source`` to ``path``: int8 weights per output channel of ``MatMul`` and
    ``Attention`` (the word-embedding table stays float32); activations are quantized per forward pass at run time."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet_onnxruntime_tools():
        quantize_dynamic(
            str(source),
            str(path),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul", "Attention"],
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # types of the fused ops' outputs
        )


def validate(path: Path, tokenizer: Any, want: np.ndarray, model_dir: Path) -> float:
    """Step 4: the sentence vectors of :data:`_PROBES` from the ONNX model ``path`` (run as :class:`OnnxEmbedder`
    runs it) against ``want``, the torch model's (:func:`_torch_vectors`).

    Returns:
        The smallest cosine similarity over the probes.

    Raises:
        ValueError: it is below :data:`MIN_PROBE_COSINE` (the message names ``model_dir``).
    """
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(path), providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_OPTIMIZERS
    )
    probe = tokenizer(_PROBES, padding=True, return_tensors="np")
    got = mean_pool_normalise(session.run(None, {n: probe[n].astype(np.int64) for n in _INPUTS})[0],
                              probe["attention_mask"])
    min_cosine = float((got * want).sum(axis=1).min())
    if min_cosine < MIN_PROBE_COSINE:
        raise ValueError(
            f"int8 export of {model_dir} disagrees with the torch model (cosine {min_cosine:.3f} < "
            f"{MIN_PROBE_COSINE}); use embedding_backend='torch'"
        )
    return min_cosine


def install(path: Path, target: Path) -> None:
    """Step 5: move the validated model ``path`` to ``target`` by a rename on the same file system: a concurrent
    reader never sees half a file, and two concurrent exports both leave a complete one."""
    os.replace(path, target)
