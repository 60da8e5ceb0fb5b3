"""All lookup backends agree on pooled outputs for the same weights and batch; training moves the tables."""
import numpy as np
import pytest
import torch

from embedding.backends import BACKENDS, BackendError, build_backend, init_weights
from embedding.backends.hybrid import HybridBackend, host_table_ids
from embedding.dlrm import DLRM
from embedding.generate import generate_batches
from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec

CPU = torch.device("cpu")


def _spec(mode="inference", dims=(16, 16, 16)):
    tables = tuple(TableSpec(f"t{i}", 3000 * (i + 1), d, pooling=PoolingSpec("skewed", 6, high=40),
                             access=AccessSpec("zipf", 1.05)) for i, d in enumerate(dims))
    return WorkloadSpec("eq", tables, batch_size=128, num_batches=2, mode=mode)


def _reference(spec, weights, batch):
    """Pooled sums computed straight from the definition, in float64."""
    out = np.zeros((spec.batch_size, sum(t.dim for t in spec.tables)))
    col = 0
    for t, (table, w) in enumerate(zip(spec.tables, weights, strict=True)):
        idx, off = batch.table_indices(t), np.concatenate([[0], np.cumsum(batch.lengths[t])])
        w64 = w.double().numpy()
        for b in range(spec.batch_size):
            out[b, col:col + table.dim] = w64[idx[off[b]:off[b + 1]]].sum(axis=0)
        col += table.dim
    return torch.from_numpy(out)


@pytest.mark.parametrize("dims", [(16, 16, 16), (8, 16, 32)])
@pytest.mark.parametrize("name,precision,tol", [("torch", "fp32", 1e-5), ("fbgemm", "fp32", 1e-5),
                                                ("torchrec", "fp32", 1e-5), ("torch", "fp16", 2e-3),
                                                ("fbgemm", "fp16", 2e-3), ("fbgemm", "int8", 2e-2)])
def test_pooled_outputs_agree_with_the_definition(dims, name, precision, tol):
    spec = _spec(dims=dims)
    weights = init_weights(spec)
    batch = generate_batches(spec)[0]
    backend = build_backend(name, spec, weights, CPU, precision)
    with torch.no_grad():
        out = backend.forward(backend.prepare(batch)).double()
    ref = _reference(spec, weights, batch)
    scale = ref.abs().max()
    assert out.shape == ref.shape
    assert (out - ref).abs().max() <= tol * scale


def test_training_step_updates_only_looked_up_rows():
    spec = _spec(mode="train")
    weights = init_weights(spec)
    batch = generate_batches(spec)[0]
    for name in BACKENDS:
        backend = build_backend(name, spec, weights, CPU)
        out = backend.forward(backend.prepare(batch))
        backend.train_step(backend.prepare(batch), torch.ones_like(out))
        after = backend.table_weights()
        for t in range(spec.num_tables):
            touched = np.unique(batch.table_indices(t))
            changed = np.nonzero((after[t] - weights[t]).abs().sum(dim=1).numpy())[0]
            assert set(changed) == set(touched), name
            # a positive output gradient moves every touched row down (sgd-like sign for all optimizers)
            assert (after[t][touched] < weights[t][touched]).all(), name


def test_fbgemm_and_torchrec_rowwise_adagrad_agree():
    """TorchRec's fused EBC and FBGEMM's TBE run the same row-wise Adagrad: same weights after a step."""
    spec = _spec(mode="train")
    weights = init_weights(spec)
    batch = generate_batches(spec)[0]
    res = []
    for name in ("fbgemm", "torchrec"):
        backend = build_backend(name, spec, weights, CPU)
        g = torch.Generator().manual_seed(0)
        grad = torch.randn(spec.batch_size, 48, generator=g)
        backend.train_step(backend.prepare(batch), grad)
        res.append(backend.table_weights())
    for a, b in zip(*res, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_hybrid_placement_keeps_table_order():
    spec = _spec(dims=(8, 16, 32))
    weights = init_weights(spec)
    batch = generate_batches(spec)[0]
    ids = host_table_ids(spec, ["t0"], host_largest=0)
    assert ids == [0] and host_table_ids(spec, [], 1) == [2]
    hybrid = HybridBackend(BACKENDS["torch"], spec, weights, ids, CPU)
    with torch.no_grad():
        out = hybrid.forward(hybrid.prepare(batch)).double()
    assert torch.allclose(out, _reference(spec, weights, batch), atol=1e-5)
    assert hybrid.transfer_bytes(spec.batch_size) == spec.batch_size * 8 * 4


def test_unsupported_combinations_are_refused_clearly():
    spec = _spec()
    weights = init_weights(spec)
    with pytest.raises(BackendError, match="supports precision"):
        build_backend("torchrec", spec, weights, CPU, "int8")
    with pytest.raises(BackendError, match="unknown backend"):
        build_backend("nope", spec, weights, CPU)
    with pytest.raises(BackendError, match="inference-only"):
        build_backend("fbgemm", _spec(mode="train"), weights, CPU, "int8")
    if not torch.cuda.is_available():
        with pytest.raises(BackendError, match="no GPU"):
            build_backend("torch", spec, weights, torch.device("cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["torch", "torchrec"])
def test_cuda_backends_agree_with_cpu(name):
    if name == "torchrec":
        pytest.importorskip("torchrec", exc_type=ImportError)  # GPU images without fbgemm-gpu cannot import it
    spec = _spec()
    weights = init_weights(spec)
    batch = generate_batches(spec)[0]
    backend = build_backend(name, spec, weights, torch.device("cuda"))
    with torch.no_grad():
        out = backend.forward(backend.prepare(batch)).double().cpu()
    assert torch.allclose(out, _reference(spec, weights, batch), atol=1e-4)


@pytest.mark.parametrize("name", list(BACKENDS))
def test_dlrm_training_step_lowers_the_loss_on_a_fixed_batch(name):
    spec = WorkloadSpec("m", tuple(TableSpec(f"t{i}", 500, 8, pooling=PoolingSpec("fixed", 3)) for i in range(3)),
                        batch_size=64, num_batches=1, mode="train",
                        dense=__import__("embedding.spec", fromlist=["DenseArch"]).DenseArch(4, (16, 8), (16, 1)))
    batch = generate_batches(spec)[0]
    model = DLRM(spec, build_backend(name, spec, init_weights(spec), CPU, learning_rate=0.1), learning_rate=0.1)
    inputs = model.prepare(batch)
    losses = [float(model.train_step(inputs)) for _ in range(30)]
    assert losses[-1] < losses[0]
    assert model.predict(inputs).shape == (64,)


def test_dlrm_refuses_unequal_dims():
    spec = _spec(dims=(8, 16, 32))
    with pytest.raises(BackendError, match="dot interaction"):
        DLRM(spec, build_backend("torch", spec, init_weights(spec), CPU))
