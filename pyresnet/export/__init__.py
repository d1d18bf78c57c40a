"""Exporting models for other runtimes (``keras.export``): ONNX through
:meth:`pyresnet.Model.export` (``format="onnx"``, see :mod:`.onnx_export`)."""
from .onnx_export import build_onnx, export_onnx

__all__ = ["build_onnx", "export_onnx"]
