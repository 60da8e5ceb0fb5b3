"""FBGEMM table-batched embeddings: one kernel call for all tables.

fp32 (training or inference): `SplitTableBatchedEmbeddingBagsCodegen`, training with the fused backward and
row-wise Adagrad (`EXACT_ROWWISE_ADAGRAD`). fp16/int8 inference: `IntNBitTableBatchedEmbeddingBagsCodegen` (int8 rows
carry an fp16 scale and bias, 4 bytes). On CUDA it needs the CUDA build of fbgemm-gpu. FBGEMM's own bounds check is
off (BoundsCheckMode.NONE, ≈ 20% of a CPU forward): every index was already checked against its table when the batch
was generated or the trace loaded.
"""
from __future__ import annotations

import torch

from ..batch import Batch
from .base import BackendError, LookupBackend

__all__ = ["FbgemmTBE", "fbgemm_available"]


def fbgemm_available(device: torch.device) -> bool:
    """fbgemm_gpu imports and has kernels for this device type (fbgemm-gpu-cpu registers CPU kernels only)."""
    try:
        import fbgemm_gpu  # noqa: F401
    except Exception:
        return False
    key = "CUDA" if device.type == "cuda" else "CPU"
    return torch._C._dispatch_has_kernel_for_dispatch_key("fbgemm::bounds_check_indices", key)


def quantize_int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise asymmetric int8: q = round((w - min) / scale), scale = (max - min) / 255, both kept in fp16."""
    lo, hi = w.min(dim=1).values, w.max(dim=1).values
    scale = ((hi - lo) / 255.0).clamp_min(1e-8).half()
    bias = lo.half()
    q = torch.round((w - bias.float()[:, None]) / scale.float()[:, None]).clamp(0, 255).to(torch.uint8)
    scale_bias = torch.stack([scale, bias], dim=1).view(torch.uint8)  # (rows, 4)
    return q, scale_bias


class FbgemmTBE(LookupBackend):
    name = "fbgemm"
    precisions = ("fp32", "fp16", "int8")

    def __init__(self, spec, weights, device, precision="fp32", learning_rate=0.01) -> None:
        super().__init__(spec, weights, device, precision, learning_rate)
        if not fbgemm_available(device):
            raise BackendError(f"backend 'fbgemm': fbgemm-gpu has no kernels for {device} here")
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import BoundsCheckMode, EmbeddingLocation
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
        )

        on_gpu = device.type == "cuda"
        self.training = spec.mode == "train"
        if precision == "fp32":
            loc = EmbeddingLocation.DEVICE if on_gpu else EmbeddingLocation.HOST
            cdev = ComputeDevice.CUDA if on_gpu else ComputeDevice.CPU
            self.tbe = SplitTableBatchedEmbeddingBagsCodegen(
                [(t.rows, t.dim, loc, cdev) for t in spec.tables],
                optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=learning_rate, eps=1e-8,
                device=device, bounds_check_mode=BoundsCheckMode.NONE)
            with torch.no_grad():
                for dst, src in zip(self.tbe.split_embedding_weights(), weights, strict=True):
                    dst.copy_(src)
            self.kernel = "fbgemm SplitTableBatchedEmbeddingBagsCodegen (fp32)"
        else:
            if self.training:
                raise BackendError(f"backend 'fbgemm': precision {precision} is inference-only (IntNBit TBE)")
            from fbgemm_gpu.split_table_batched_embeddings_ops_inference import (
                IntNBitTableBatchedEmbeddingBagsCodegen,
            )

            sparse_type = SparseType.INT8 if precision == "int8" else SparseType.FP16
            loc = EmbeddingLocation.DEVICE if on_gpu else EmbeddingLocation.HOST
            self.tbe = IntNBitTableBatchedEmbeddingBagsCodegen(
                [(t.name, t.rows, t.dim, sparse_type, loc) for t in spec.tables], output_dtype=SparseType.FP32,
                device=device, bounds_check_mode=BoundsCheckMode.NONE)
            self.tbe.initialize_weights()
            with torch.no_grad():
                for (dst, dst_sb), src in zip(self.tbe.split_embedding_weights(), weights, strict=True):
                    if precision == "int8":
                        q, sb = quantize_int8_rows(src)
                        dst.copy_(q.to(device))
                        dst_sb.copy_(sb.to(device))
                    else:
                        dst.copy_(src.half().view(torch.uint8).to(device))
            self.kernel = f"fbgemm IntNBitTableBatchedEmbeddingBagsCodegen ({precision})"

    @property
    def optimizer(self) -> str:
        return "fbgemm EXACT_ROWWISE_ADAGRAD (fused backward)" if self.training else "none"

    def prepare(self, batch: Batch):
        idx = torch.from_numpy(batch.indices).to(self.device)
        off = torch.from_numpy(batch.offsets).to(self.device)
        if self.precision != "fp32":
            return idx.int(), off.int()
        return idx, off

    def forward(self, inputs) -> torch.Tensor:
        return self.tbe(*inputs)


    def table_weights(self) -> list[torch.Tensor]:
        if self.precision == "fp32":
            return [w.detach().float().cpu().clone() for w in self.tbe.split_embedding_weights()]
        out = []
        for w, sb in self.tbe.split_embedding_weights():
            if self.precision == "fp16":
                out.append(w.cpu().view(torch.float16).float())
            else:
                s = sb.cpu().contiguous().view(torch.float16).float()  # (rows, 2): scale, bias
                out.append(w.cpu().float() * s[:, :1] + s[:, 1:])
        return out


