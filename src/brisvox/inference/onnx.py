"""Loading onnxruntime sessions the way every brisvox model wants them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from brisvox.inference.errors import ModelError

__all__ = ["load_session"]


def load_session(path: Path, threads: int = 1) -> Any:
    """A CPU session for ``path`` with ``threads`` intra-op threads (our pool gives parallelism).

    Raises :class:`ModelError` when onnxruntime is missing (install the ``local`` extra) or
    the file is not a loadable model.
    """
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ModelError("onnxruntime is not installed; install brisvox[local]") from exc
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types
        raise ModelError(f"cannot load model {path}: {exc}") from exc
