"""TorchRec `EmbeddingBagCollection` over a `KeyedJaggedTensor` (keys = tables). Training uses TorchRec's
`FusedEmbeddingBagCollection` with row-wise Adagrad fused into the backward, as TorchRec trains in production."""
from __future__ import annotations

import torch

from ..batch import Batch
from .base import LookupBackend

__all__ = ["TorchRecEBC"]


class TorchRecEBC(LookupBackend):
    name = "torchrec"
    precisions = ("fp32",)

    def __init__(self, spec, weights, device, precision="fp32", learning_rate=0.01) -> None:
        super().__init__(spec, weights, device, precision, learning_rate)
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

        self.keys = [t.name for t in spec.tables]
        configs = [EmbeddingBagConfig(name=t.name, embedding_dim=t.dim, num_embeddings=t.rows,
                                      feature_names=[t.name]) for t in spec.tables]
        self.training = spec.mode == "train"
        if self.training:
            from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection
            from torchrec.optim import RowWiseAdagrad

            self.ebc = FusedEmbeddingBagCollection(configs, optimizer_type=RowWiseAdagrad,
                                                   optimizer_kwargs={"lr": learning_rate, "eps": 1e-8},
                                                   device=device)
            self.kernel = "torchrec FusedEmbeddingBagCollection (fbgemm TBE, row-wise Adagrad)"
        else:
            self.ebc = EmbeddingBagCollection(configs, device=device)
            self.kernel = "torchrec EmbeddingBagCollection (nn.EmbeddingBag per table)"
        state = self.ebc.state_dict()
        with torch.no_grad():
            for t, w in zip(spec.tables, weights, strict=True):
                state[f"embedding_bags.{t.name}.weight"].copy_(w)

    @property
    def optimizer(self) -> str:
        return "torchrec RowWiseAdagrad (fused)" if self.training else "none"

    def prepare(self, batch: Batch):
        from torchrec import KeyedJaggedTensor

        return KeyedJaggedTensor(keys=self.keys, values=torch.from_numpy(batch.indices),
                                 lengths=torch.from_numpy(batch.lengths.ravel())).to(self.device)

    def forward(self, kjt) -> torch.Tensor:
        return self.ebc(kjt).values()


    def table_weights(self) -> list[torch.Tensor]:
        state = self.ebc.state_dict()
        return [state[f"embedding_bags.{t.name}.weight"].detach().float().cpu().clone() for t in self.spec.tables]
