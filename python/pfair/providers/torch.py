"""The gradient provider of any ``torch.nn.Module``: SteFFLe's five parts with ``torch.func``.

A :class:`TorchProvider` holds one silo's records and a module that maps a batch of inputs (the
rows of the federation's 2-D arrays, reshaped to ``input_shape``) to ``l`` logits; the class
probabilities are ``F = softmax(logits)``. θ on the wire is the flat float64 vector of the
module's trainable parameters in ``module.parameters()`` order (``parameters_to_vector``); the
module itself may run in float32 or float64, and every part is accumulated in float64.

With the notation of ``rust/src/psi/mod.rs`` and ``docs/deep.md``, for the records of a batch B
(fixed denominator m; the penalty block b of a record is 0 for demographic parity, its label y for
equalized odds, and 0 for a positive record of equal opportunity, whose other records are outside
the penalty)::

    g    = (1/m) Σ_B ∇_θ CE_i                                          one batched backward
    a_θ  = (1/m) Σ_pen ∇_θ [−Σ_u F_iu q_bu],  q_bu = ‖W_b[:, u]‖²        one batched backward
    h_θ  = (1/m) Σ_pen clip_{C_θ}(b_i),  b_i = ∇_θ [β_i · F_i]            per record (torch.func)
           β_i = 2 p_b(s_i)^{-1/2} W_b[s_i, :]
    a_W  = −2 W_b diag(Σ_pen F_i) / m                                   closed form
    h_W  = Σ_pen 2 p_b(s_i)^{-1/2} e_{s_i} F_iᵀ / m                      closed form

Every θ-part is a gradient ``∇_θ ⟨v_i, z_i(θ)⟩`` of the logits z_i against a vector v_i that is
computed in closed form from F_i (the softmax pull-back ``v = F ⊙ (∇_F − F·∇_F)``, or ``F − e_y``
for the cross-entropy). So g and a_θ are one backward pass each over the whole batch, and only
b — the one s-dependent θ-part, whose per-record norm must be clipped — needs per-record
gradients: ``vmap(grad(θ ↦ ⟨v_i, functional_call(module, θ, x_i)⟩))`` (a ``vjp`` per record, vmapped)
in chunks of ``chunk_size`` records, each clipped to C_θ and summed. The per-record gradients,
their norms and the clipped sums stay in the module's dtype on its device (as DP-SGD's): float64
is used only for what the sensitivity argument needs — combining per-block norms, the clip factor
``C (1 − δ)/‖·‖`` with the rounding margin δ of :func:`norm_margin`, and the running totals — so a
clipped record has norm ≤ C after rounding (:func:`squared_norms`, :func:`norm_margin`).

Record mode (``protect="record"``) clips as the Rust kernel does: per record ∇ℓ_i to C_loss, the
whole ∇_θψ_i = a_θ,i + b_i to C_θ (a_θ is folded in and ``psi_theta_sfree`` is zero), and the
whole ∇_Wψ_i = −2 W_b diag(F_i) + 2 p_b(s_i)^{-1/2} e_{s_i} F_iᵀ to C_W (``psi_w_sfree`` is zero).

A module that mixes the records of a batch (BatchNorm in training mode) would make one record's
s move every other record's gradient, and the sensitivities would not hold: it is refused
(:func:`check_per_record`). The provider never sees a noise key: :class:`pfair.protocol.SiloParty`
adds the noise (on CPU, float64, from the silo's secret ChaCha20 key) after the parts come back.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vjp, vmap

from pfair._validation import resolve_fairness
from pfair.notions import FAIRNESS_NOTIONS as FAIRNESS  # noqa: F401  (re-exported)
from pfair.notions import FairnessNotion
from pfair.privacy.calibration import sample_rate_and_denominator
from pfair.providers.base import BatchParts, constant_probabilities

#: Memory the per-record gradients of one chunk may take when ``chunk_size=None`` (bytes), on the
#: CPU; on a GPU the larger of this and a quarter of the device's free memory (:func:`chunk_budget`).
CHUNK_BUDGET = 2**30
_TINY = np.finfo(np.float64).tiny  # as Rust's f64::MIN_POSITIVE in the loss


def probabilities(logits: torch.Tensor) -> torch.Tensor:
    """Softmax rows that are probability vectors whatever the logits, as the Rust kernel's
    ``softmax_in_place``: a row with logits of +∞ (an overflow under a hostile θ) puts equal mass
    on those classes, and a row with a NaN and no +∞, or with no finite maximum, is uniform. The ψ
    part c_i = 2 p(s_i)^{-1/2} e_{s_i} F_iᵀ is not clipped; a NaN in F_i would show s_i.

    Written with ``torch.where`` on the n × l matrix (no data-dependent branch), so that on a GPU
    it never waits for the device."""
    F = torch.softmax(logits, dim=1)
    bad = ~torch.isfinite(F).all(dim=1, keepdim=True)
    top = logits == math.inf
    n_top = top.sum(dim=1, keepdim=True)
    fallback = torch.where(n_top > 0, top.to(F.dtype) / n_top.clamp_min(1), torch.full_like(F, 1.0 / F.shape[1]))
    return torch.where(bad, fallback, F)


#: Largest number of entries whose squares one reduction in the module's dtype sums (see
#: :func:`squared_norms` and :func:`norm_margin`).
NORM_BLOCK = 4096


def squared_norms(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """``‖G_ij‖²`` in float64 of per-record gradients given as one ``c × r × numel`` tensor per
    parameter tensor, without a float64 copy of them: each tensor's last axis is reduced in the
    tensors' own dtype (``vector_norm``) over blocks of at most :data:`NORM_BLOCK` entries, and
    the block norms are squared and summed in float64. A block's norm is then within a relative
    ``(NORM_BLOCK/2 + 2) u`` of the exact norm of the rounded entries, whatever the order of the
    reduction (u the dtype's unit roundoff; Higham's bound for a sum of non-negative terms), and
    the float64 combination adds nothing at that scale (:func:`norm_margin`). An entry of ±∞ or
    NaN, or a float32 overflow of a square, makes the norm non-finite."""
    sq = None
    for g in grads:
        n = g.shape[-1]
        if n <= NORM_BLOCK:
            part = torch.linalg.vector_norm(g, dim=-1).to(torch.float64).square()
        else:
            full = n // NORM_BLOCK * NORM_BLOCK
            head = g[..., :full].unflatten(-1, (full // NORM_BLOCK, NORM_BLOCK))
            part = torch.linalg.vector_norm(head, dim=-1).to(torch.float64).square().sum(-1)
            if full < n:
                part = part + torch.linalg.vector_norm(g[..., full:], dim=-1).to(torch.float64).square()
        sq = part if sq is None else sq + part
    assert sq is not None
    return sq


#: Records whose clipped gradients are summed in the module's dtype before the sum is widened to
#: float64 (:func:`block_sum`); the rounding of such a sum is part of :func:`norm_margin`.
SUM_BLOCK = 64


def block_sum(factors: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``Σ_i f_i · rows_i`` in float64, summed in the rows' dtype over blocks of at most
    :data:`SUM_BLOCK` records and in float64 across blocks: the rounding a record's neighbours
    can add to the sum it is in stays within :func:`norm_margin`'s bound. The whole blocks are
    one batched product (``bmm`` of ``c/k`` blocks of ``1 × k`` factors by ``k × numel`` rows),
    the last partial block one product."""
    n, k = factors.shape[0], SUM_BLOCK
    whole = n // k * k
    total = None
    if whole:
        blocks = torch.bmm(factors[:whole].view(-1, 1, k), rows[:whole].reshape(whole // k, k, -1))
        total = blocks.to(torch.float64).sum(dim=(0, 1))
    if whole < n:
        part = (factors[whole:] @ rows[whole:]).to(torch.float64)
        total = part if total is None else total + part
    if total is None:
        return torch.zeros(rows.shape[1:], dtype=torch.float64, device=rows.device)
    return total


def _added(total: torch.Tensor | None, part: torch.Tensor) -> torch.Tensor:
    """``total + part``, or ``part`` for the first chunk (no zeros to add it to)."""
    return part if total is None else total + part


def norm_margin(dtype: torch.dtype, sizes: Sequence[int]) -> float:
    """The relative margin δ of the clip: records are clipped to ``C (1 − δ)`` so that the clipped
    vector *as rounded* has norm ≤ C. With u the unit roundoff of ``dtype`` (2⁻²⁴ for float32,
    2⁻⁵³ for float64) and B the largest block :func:`squared_norms` reduces (≤ NORM_BLOCK):

    * the computed norm ñ of a record is within ``(B/2 + 2) u`` of the exact norm n of its rounded
      gradient, so an unclipped record (ñ ≤ C(1 − δ)) has n ≤ C;
    * a clipped one is scaled by ``f = C(1 − δ)/ñ``, rounded to the dtype (u), and each entry of
      the product is rounded (u): its norm is at most ``C (1 − δ)(1 + (B/2 + 2) u)(1 + 2u)``.

    ``(B + 8) u`` covers both with room to spare. The clipped vectors are then summed in the dtype
    over blocks of k ≤ :data:`SUM_BLOCK` records (:func:`block_sum`): that sum's rounding error has
    norm at most ``γ_k Σ_i ‖a_i‖ ≤ k γ_k C`` with ``γ_k = k u / (1 − k u)``, and it depends on the
    block's other records. Between neighbouring batches (one record's part changed, every other
    block computed alike) the exact block sums differ by at most ``2 C (1 − k γ_k)`` when each
    record is clipped within ``C (1 − k γ_k)``, and the two roundings add at most ``2 k γ_k C``:
    at most 2C in all. So ``δ = (B + 8) u + k γ_k``: 4.9e-4 for float32 (B = 4,096, k = 64), 9.1e-13 for
    float64 — a clip norm smaller by that fraction, nothing else."""
    u = torch.finfo(dtype).eps / 2
    block = min(NORM_BLOCK, max(sizes) if len(sizes) else 1)
    k = SUM_BLOCK
    return float((block + 8) * u + k * (k * u / (1 - k * u)))


def chunk_budget(device: torch.device) -> int:
    """Bytes one chunk's per-record gradients may take: :data:`CHUNK_BUDGET` on the CPU; on a GPU
    also up to a quarter of its free memory (the rest is for the activations of the chunk's
    per-record pass, which grow with the input size, and for the batched passes)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return max(CHUNK_BUDGET, int(free) // 4)
    return CHUNK_BUDGET


def clip_factors(norms: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``min(1, clip / norm)`` per record, 0 for a non-finite norm (an overflow under a hostile θ
    or W: no direction to keep, and 0 is in the ball), and whether each record was clipped. Scale
    with :func:`scale_rows` (or sum through :func:`zero_rows`), not a product (0 · ∞ is NaN)."""
    finite = torch.isfinite(norms)
    over = (norms > clip) | ~finite
    safe = torch.where(over & finite, norms, torch.ones_like(norms))
    factor = torch.where(over, torch.where(finite, clip / safe, torch.zeros_like(norms)), torch.ones_like(norms))
    return factor, over


def zero_rows(factor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``rows`` with row i set to 0 where ``factor[i]`` is 0 (such a row may hold ∞ or NaN)."""
    f = factor.view((-1,) + (1,) * (rows.dim() - 1))
    return torch.where(f == 0, torch.zeros_like(rows), rows)


def scale_rows(factor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``factor[i] · rows[i]``, exactly 0 where the factor is 0 (:func:`zero_rows`)."""
    return factor.view((-1,) + (1,) * (rows.dim() - 1)) * zero_rows(factor, rows)

__all__ = ["TorchProvider", "check_per_record", "module_theta", "set_module_theta", "resolve_device",
           "trainable_parameters"]


# ---------------------------------------------------------------------------------------------
# Module helpers


def resolve_device(device: Any = "auto") -> torch.device:
    """``"auto"``: CUDA when available, else CPU; otherwise ``torch.device(device)``."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (TypeError, RuntimeError) as exc:
        raise ValueError(f"device={device!r} is not a torch device; use 'auto', 'cpu' or 'cuda' ({exc})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available here; use device='cpu' or 'auto'")
    if dev.type == "mps":
        raise ValueError("device='mps' has no float64, which the parts are accumulated in; use device='cpu'")
    return dev


def trainable_parameters(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` of the parameters θ is made of: those with ``requires_grad``, in the
    order of ``module.parameters()`` (a frozen parameter stays at its value, like a buffer)."""
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad]


def module_theta(module: nn.Module) -> np.ndarray:
    """The module's trainable parameters as the flat float64 θ of the wire
    (``parameters_to_vector`` when every parameter is trainable)."""
    params = [p for _, p in trainable_parameters(module)]
    if not params:
        raise ValueError("module has no trainable parameters (every parameter has requires_grad=False)")
    with torch.no_grad():
        return torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in params]).numpy().copy()


def set_module_theta(module: nn.Module, theta: np.ndarray) -> nn.Module:
    """Write the flat θ into the module's trainable parameters (in place); returns the module."""
    params = [p for _, p in trainable_parameters(module)]
    theta = np.asarray(theta, dtype=np.float64).ravel()
    total = sum(p.numel() for p in params)
    if theta.size != total:
        raise ValueError(f"theta has {theta.size} entries but the module has {total} trainable parameters")
    with torch.no_grad():
        flat = torch.from_numpy(theta)
        offset = 0
        for p in params:
            n = p.numel()
            p.copy_(flat[offset:offset + n].view_as(p).to(p.device, p.dtype))
            offset += n
    return module


def constant_module_theta(module: nn.Module, theta: np.ndarray, n_classes: int, input_shape: Sequence[int],
                          cls: int, share: float) -> np.ndarray | None:
    """θ of the constant predictor of class ``cls`` (its share of the held-out records ``share``,
    the other classes sharing the rest evenly) made from the model ``theta`` of ``module``: the
    module's last ``nn.Linear`` with l outputs and a trainable bias gets weight 0 and bias
    ``log p``, every other parameter keeps its value. None when the module has no such layer, or
    when its output is then not that constant on public probe inputs (zeros and normal draws of a
    fixed seed: no record is read), e.g. under a layer after it. Post-processing of the released
    validation tables (where ``cls`` and ``share`` come from) and of the public θ; a copy of the
    module is changed, never ``module``."""
    l, c = int(n_classes), int(cls)  # noqa: E741
    work = copy.deepcopy(module)
    set_module_theta(work, theta)
    trainable = {name for name, _ in trainable_parameters(work)}
    layer = None
    for prefix, m in work.named_modules():
        if isinstance(m, nn.Linear) and m.out_features == l and m.bias is not None:
            layer = (prefix, m)
    if layer is None or not {f"{layer[0]}.weight".lstrip("."), f"{layer[0]}.bias".lstrip(".")} <= trainable:
        return None
    probs = constant_probabilities(l, c, share)
    bias = np.log(probs)
    bias[c] = max(bias[c], np.nextafter(float(np.max(np.delete(bias, c))), np.inf))  # c wins argmax
    linear = layer[1]
    with torch.no_grad():
        linear.weight.zero_()
        linear.bias.copy_(torch.from_numpy(bias).to(linear.bias.device, linear.bias.dtype))
        probe = torch.randn((8, *input_shape), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        probe = torch.cat([torch.zeros((1, *input_shape), dtype=torch.float64), probe])
        got = torch.softmax(work(probe.to(linear.weight.device, linear.weight.dtype)).to(torch.float64), dim=1)
    got = got.cpu().numpy()
    if not (np.all(np.argmax(got, axis=1) == c) and np.allclose(got, probs, rtol=1e-3, atol=1e-6)):
        return None
    return module_theta(work)


def check_per_record(module: nn.Module) -> None:
    """Refuse layers whose output for one record depends on the other records of the batch, or
    that are random: they break the per-record sensitivity (or the exact split of ∇ψ into parts).

    * ``BatchNorm*`` / ``SyncBatchNorm`` in training mode (or with ``track_running_stats=False``,
      which normalises with the batch's statistics even in eval mode);
    * ``Dropout*`` in training mode (each pass would draw another mask).
    """
    for name, sub in module.named_modules():
        where = f"layer {name!r} ({type(sub).__name__})" if name else f"the module ({type(sub).__name__})"
        if isinstance(sub, nn.modules.batchnorm._BatchNorm) and (sub.training or not sub.track_running_stats):
            raise ValueError(
                f"{where} normalises each record with statistics of the whole batch, so one record's "
                "sensitive attribute moves every other record's gradient and the noise no longer covers it "
                "(per-record sensitivity breaks). Replace it with nn.GroupNorm (e.g. nn.GroupNorm(32, C), or "
                "nn.GroupNorm(1, C) for a layer norm over channels), or freeze it with .eval() and "
                "track_running_stats=True so that it applies fixed statistics"
            )
        if isinstance(sub, nn.modules.dropout._DropoutNd) and sub.training and sub.p > 0:
            raise ValueError(
                f"{where} is random in training mode: the batched and the per-record passes would see "
                "different masks, and the parts would not be gradients of one model. Remove it, set p=0, "
                "or call .eval() on it"
            )


def _module_dtype(module: nn.Module) -> torch.dtype:
    dtypes = {p.dtype for _, p in trainable_parameters(module)}
    if not dtypes:
        raise ValueError("module has no trainable parameters (every parameter has requires_grad=False)")
    if len(dtypes) > 1 or not dtypes <= {torch.float32, torch.float64}:
        raise ValueError(f"module's trainable parameters have dtypes {sorted(map(str, dtypes))}; use one of "
                         "float32 or float64 for all of them (module.float() or module.double())")
    return dtypes.pop()


# ---------------------------------------------------------------------------------------------
# The provider


class TorchProvider:
    """SteFFLe's parts for one silo's records under a ``torch.nn.Module`` (module docstring).

    Parameters
    ----------
    module : torch.nn.Module mapping ``(n, *input_shape)`` inputs to ``(n, n_classes)`` logits. It is
        moved to ``device``; its parameters are not changed (θ is passed to each call). One module
        may be shared by the providers of all silos.
    X, y, s : one silo's features (``n × d``, float32 or float64, kept as they are; other types are
        converted to float64), label and group indices.
    rows : None, or the row indices of ``X`` that hold the silo's records, in order (``X`` is then
        a matrix shared by several silos, e.g. a :class:`~pfair.federation.Federation`'s; its
        rows are read in place, never copied).
    n_groups, n_classes : k and l of the federation's global encodings.
    denominator : the silo's fixed m (batch size; ``q·n`` for Poisson sampling; n for full batch).
    fairness, positive_class : the ψ-term's notion (a :class:`pfair.notions.FairnessNotion`, or its public
        name with the positive class index).
    protect : ``"attribute"`` or ``"record"``.
    clip_theta, clip_loss, clip_w : clip norms (``inf``: none; clip_loss and clip_w record mode only).
    send_psi : False when λ = 0: the ψ parts are not sent, so they are not computed (zeros).
    input_shape : shape of one input; default ``(d,)``. ``prod(input_shape)`` must equal d.
    device : ``"auto"`` (CUDA if available), ``"cpu"``, ``"cuda"``, ``"cuda:1"``, a torch.device.
    chunk_size : records per vmap call of the per-record gradients (memory ∝ chunk_size ×
        #parameters); None picks the largest that keeps one chunk's gradients (#parameters × the
        dtype's bytes, twice in record mode, per record) under :func:`chunk_budget` — 1 GiB on the
        CPU, a quarter of the free memory on a GPU — at most 1,024.
    """

    def __init__(self, module: nn.Module, X: Any, y: Any, s: Any, *, n_groups: int, n_classes: int,
                 denominator: float, fairness: FairnessNotion | str = "demographic_parity", positive_class: int = 1,
                 protect: str = "attribute", clip_theta: float = math.inf, clip_loss: float = math.inf,
                 clip_w: float = math.inf, send_psi: bool = True, input_shape: Sequence[int] | None = None,
                 device: Any = "auto", chunk_size: int | None = None, rows: Any = None) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        notion = resolve_fairness(fairness, positive_class)
        if protect not in ("attribute", "record"):
            raise ValueError(f"protect={protect!r} is not supported; choose 'attribute' or 'record'")
        for name, c in (("clip_theta", clip_theta), ("clip_loss", clip_loss), ("clip_w", clip_w)):
            if not (isinstance(c, (int, float)) and c > 0):
                raise ValueError(f"{name} must be > 0 (use inf for no clipping), got {c!r}")
        if not (denominator > 0 and math.isfinite(denominator)):
            raise ValueError(f"denominator must be a finite number > 0 (the silo's fixed batch divisor m), "
                             f"got {denominator!r}")
        if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                       or chunk_size < 1):
            raise ValueError(f"chunk_size must be an integer >= 1 or None (automatic), got {chunk_size!r}")
        Xa = np.asarray(X)
        if Xa.dtype not in (np.float32, np.float64):
            Xa = Xa.astype(np.float64)
        Xa = np.ascontiguousarray(Xa)  # float32 stays float32: each batch is cast to the module's dtype
        if Xa.ndim != 2:
            raise ValueError(f"X must be 2-D (n_records, n_features), got shape {Xa.shape}; pass images "
                             "flattened, with input_shape=(C, H, W)")
        d = Xa.shape[1]
        index = None if rows is None else np.asarray(rows, dtype=np.int64).ravel()
        if index is not None and index.size and (int(index.min()) < 0 or int(index.max()) >= Xa.shape[0]):
            raise ValueError(f"rows must be row indices of X (0..{Xa.shape[0] - 1})")
        n = Xa.shape[0] if index is None else index.size
        y = np.asarray(y, dtype=np.int64).ravel()
        s = np.asarray(s, dtype=np.int64).ravel()
        if y.shape[0] != n or s.shape[0] != n:
            raise ValueError(f"X has {n} rows but y has {y.shape[0]} and s has {s.shape[0]}; they must match")
        k, l = int(n_groups), int(n_classes)
        if k < 2 or l < 2:
            raise ValueError(f"n_groups and n_classes must be >= 2, got {k} and {l}")
        if n and (y.min() < 0 or y.max() >= l or s.min() < 0 or s.max() >= k):
            raise ValueError(f"y must hold class indices in 0..{l - 1} and s group indices in 0..{k - 1}")
        notion.check_classes(l)
        shape = (d,) if input_shape is None else tuple(int(v) for v in input_shape)
        if int(np.prod(shape)) != d:
            raise ValueError(f"input_shape={shape} has {int(np.prod(shape))} entries but each record has {d} "
                             "features; they must match (e.g. input_shape=(1, 8, 8) for 64 pixels)")

        self.device = resolve_device(device)
        self.module = module.to(self.device)
        check_per_record(self.module)
        self.dtype = _module_dtype(self.module)
        named = trainable_parameters(self.module)
        self._names = [name for name, _ in named]
        self._shapes = [tuple(p.shape) for _, p in named]
        self._sizes = [p.numel() for _, p in named]
        self.n_params = int(sum(self._sizes))
        trainable = set(self._names)
        self._consts = {name: t for name, t in self.module.named_parameters() if name not in trainable}
        self._consts.update(dict(self.module.named_buffers()))

        self.n_records = int(n)
        self.n_features = int(d)
        self.input_shape = shape
        self.k, self.l = k, l
        self.notion = notion
        self.fairness, self.positive = notion.name, int(notion.positive)
        self.blocks = notion.n_blocks(l)
        self.denominator = float(denominator)
        self.protect = protect
        self.clip_theta, self.clip_loss, self.clip_w = float(clip_theta), float(clip_loss), float(clip_w)
        self.send_psi = bool(send_psi)
        per_record = self.n_params * (torch.finfo(self.dtype).bits // 8) * (2 if protect == "record" else 1)
        self.chunk_size = chunk_size or int(max(1, min(1024, chunk_budget(self.device) // max(per_record, 1))))
        #: Clip margin δ (:func:`norm_margin`): records are clipped to C (1 − δ).
        self._margin = norm_margin(self.dtype, self._sizes)
        #: Host ↔ device copies made so far (:meth:`parts` documents how many a step makes).
        self.transfers = {"to_device": 0, "to_host": 0}
        # The silo's data: a zero-copy CPU view (of its rows of a shared matrix with ``rows``),
        # in the dtype it came in; each batch is gathered, moved to the device and cast there.
        # Labels and groups stay on the host, where the penalty's rows are chosen.
        self._X = torch.from_numpy(Xa)
        self._rows = None if index is None else torch.from_numpy(index)
        self._y_np, self._s_np = y, s
        self._probe()

    @classmethod
    def for_silo(cls, module: nn.Module, silo: Any, settings: Any, *, n_groups: int, n_classes: int,
                 **kwargs: Any) -> "TorchProvider":
        """The provider of a :class:`~pfair.federation.Silo` under :class:`~pfair.settings.SteFFLeSettings`
        (denominator, protection, clip norms and fairness notion as the Rust ``SiloConfig`` of
        :func:`pfair.protocol.silo.silo_config` has them)."""
        _, denom = sample_rate_and_denominator(settings.sampling, len(silo), settings.batch_size)
        X, rows = silo.features_in_place()
        return cls(module, X, silo.y, silo.s, n_groups=n_groups, n_classes=n_classes, denominator=denom, rows=rows,
                   fairness=settings.notion, protect=settings.protect,
                   send_psi=settings.sends_psi, **settings.clips(), **kwargs)

    # ------------------------------------------------------------------ the model as a function of θ
    def _params(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return {name: t.view(shape) for name, t, shape in zip(self._names, flat.split(self._sizes), self._shapes)}

    def _logits(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, (self._params(flat), self._consts), (x,))

    def _inputs(self, rows: torch.Tensor) -> torch.Tensor:
        if self._rows is not None:
            rows = self._rows[rows]
        x = self._X.index_select(0, rows) if rows.numel() else self._X[:0]
        return self._to_device(x, self.dtype).reshape((-1, *self.input_shape))

    def _probe(self) -> None:
        if self.n_records == 0:
            return
        x = self._inputs(torch.arange(min(2, self.n_records)))
        with torch.no_grad():
            flat = torch.from_numpy(module_theta(self.module)).to(self.device, self.dtype)
            try:
                out = self._logits(flat, x)
            except Exception as exc:  # noqa: BLE001 - re-raised with the likely fix
                raise ValueError(f"module fails on a batch of inputs of shape {tuple(x.shape)} ({type(exc).__name__}: "
                                 f"{exc}); pass input_shape= (e.g. (1, 8, 8) for 8×8 grey images; rows of the "
                                 "2-D federation arrays are reshaped to it)") from exc
        want = (min(2, self.n_records), self.l)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"module maps inputs of shape {(want[0], *self.input_shape)} to {got}; it must return "
                             f"logits of shape {want} (one per class, l = {self.l}); check input_shape and the "
                             "last layer's width")

    def theta(self) -> np.ndarray:
        """The module's current parameters as the wire's θ."""
        return module_theta(self.module)

    def constant_theta(self, cls: int, share: float, theta: np.ndarray) -> np.ndarray | None:
        """:func:`constant_module_theta` of this silo's module (the assembler's ``constant(c, p, θ)``)."""
        return constant_module_theta(self.module, theta, self.l, self.input_shape, cls, share)

    def predict(self, theta: np.ndarray) -> np.ndarray:
        """Predicted class index ``ŷ_i = argmax_c z_c(x_i; θ)`` of each of the silo's records, from
        the same ``functional_call`` of the module at θ that the gradients use (forward passes in
        chunks, no gradients). This is the ŷ that the violation release of ``max_violation``
        counts (:meth:`pfair.notions.FairnessNotion.violation_counts`); θ is the model the server already
        holds, and each record adds exactly one count, so the release's sensitivity (√2) does not
        depend on the model."""
        theta = np.asarray(theta, dtype=np.float64).ravel()
        if theta.size != self.n_params:
            raise ValueError(f"theta has {theta.size} entries, the module has {self.n_params} trainable parameters")
        flat = self._to_device(torch.from_numpy(theta), self.dtype)
        out = np.empty(self.n_records, dtype=np.int64)
        with torch.no_grad():
            for start in range(0, self.n_records, self.chunk_size):
                rows = torch.arange(start, min(start + self.chunk_size, self.n_records))
                logits = self._logits(flat, self._inputs(rows))
                out[start:start + rows.numel()] = torch.argmax(logits, dim=1).cpu().numpy()
        return out

    # ------------------------------------------------------------------ per-record gradients
    def _one_from(self, tensors: tuple, x: torch.Tensor) -> torch.Tensor:
        params = dict(zip(self._names, tensors))
        return functional_call(self.module, (params, self._consts), (x.unsqueeze(0),)).squeeze(0)

    def _per_record(self, tensors: tuple, x: torch.Tensor, v: torch.Tensor) -> tuple:
        """``∇_θ ⟨v_ij, z_i(θ)⟩`` for every record i and vector j (``v``: n × r × l), one tensor per
        parameter, each ``n × r × numel``; vmap over records, and over the r vectors of a record
        inside it (one forward pass per record, ``vjp``)."""

        def per_record(xi: torch.Tensor, vs: torch.Tensor) -> tuple:
            _, pull = vjp(lambda *ts: self._one_from(ts, xi), *tensors)
            if vs.shape[0] == 1:
                return tuple(g.unsqueeze(0) for g in pull(vs[0]))
            return vmap(pull)(vs)

        grads = vmap(per_record)(x, v)
        return tuple(g.reshape(g.shape[0], g.shape[1], -1) for g in grads)

    def _clipped_sums(self, flat: torch.Tensor, x: torch.Tensor, v: torch.Tensor,
                      clips: Sequence[float]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """For each of the r vector sets ``v[:, j]`` (n × r × l): ``Σ_i clip_{C_j}(∇_θ⟨v_ij, z_i⟩)``,
        returned in float64, and how many clippings were active (a 0-d float64 tensor on the device).

        Per chunk of records: the per-record gradients ``G`` (one ``c × r × numel`` tensor per
        parameter tensor) stay in the module's dtype on its device. Their norms come from
        :func:`squared_norms` (reductions in that dtype over blocks of at most ``NORM_BLOCK``
        entries, combined in float64), the factor is ``f_ij = min(1, C_j (1 − δ) / ‖G_ij‖)`` with
        the rounding margin δ of :func:`norm_margin`, and the chunk's sum is one product
        ``f_jᵀ G_j`` per parameter tensor and block of :data:`SUM_BLOCK` records in the module's
        dtype (:func:`block_sum`), added to float64 totals. So the computed sums of neighbouring
        batches differ by at most ``2 C_j`` (the sensitivity argument; :func:`norm_margin` covers
        the rounding of a record and of its block's sum).

        Non-finite safety without full-size passes: a record whose gradient holds ∞ or NaN (a
        hostile θ or W) has a non-finite norm, so *one* reduction over the c × r norms tells whether
        the chunk is clean. Only when it is not, the sum is taken over the finite records alone
        (``index_select``): such a record contributes 0, which is in the ball, as in the Rust
        kernel. That check is the one device → host read of a chunk."""
        n, r = v.shape[0], v.shape[1]
        f64 = torch.float64
        tensors = tuple(t.view(shape) for t, shape in zip(flat.split(self._sizes), self._shapes))
        sums: list[list[Any]] = [[None] * len(self._sizes) for _ in range(r)]  # float64 totals
        clipped = torch.zeros((), dtype=f64, device=self.device)
        limits = [c * (1.0 - self._margin) for c in clips]  # Python floats: no copy to the device
        for start in range(0, n, self.chunk_size):
            sl = slice(start, start + self.chunk_size)
            grads = self._per_record(tensors, x[sl], v[sl].to(self.dtype))
            norms = squared_norms(grads).sqrt()  # c × r, float64
            # f = min(1, limit / ‖G‖): 1 for a zero gradient (limit / 0 = inf) and for every record
            # when C = inf; NaN or 0 for a non-finite norm, whose record is left out below.
            factor = torch.stack([(limit / norms[:, j]).clamp_(max=1.0) for j, limit in enumerate(limits)], 1) \
                if r > 1 else (limits[0] / norms).clamp_(max=1.0)
            clipped = clipped + sum((norms[:, j] > limit).sum(dtype=f64) for j, limit in enumerate(limits))
            if self._host_flag(torch.isfinite(norms.sum())):  # one reduction: is every norm finite?
                fac = factor.to(self.dtype)
                for t, g in enumerate(grads):
                    for j in range(r):
                        sums[j][t] = _added(sums[j][t], block_sum(fac[:, j], g[:, j]))
            else:
                finite = torch.isfinite(norms)
                for j in range(r):
                    keep = finite[:, j].nonzero().squeeze(1)
                    fac = factor[keep, j].to(self.dtype)
                    for t, g in enumerate(grads):
                        sums[j][t] = _added(sums[j][t], block_sum(fac, g[:, j].index_select(0, keep)))
            del grads
        if n == 0:
            return [torch.zeros(self.n_params, dtype=f64, device=self.device) for _ in range(r)], clipped
        return [torch.cat(parts) for parts in sums], clipped

    # ------------------------------------------------------------------ transfers
    def _to_device(self, t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Host → device copy (counted in ``transfers``)."""
        self.transfers["to_device"] += 1
        return t.to(self.device, dtype, non_blocking=True)

    def _to_host(self, t: torch.Tensor) -> np.ndarray:
        """Device → host copy as a float64 NumPy array (counted in ``transfers``)."""
        self.transfers["to_host"] += 1
        return t.detach().to("cpu", torch.float64).numpy()

    def _host_flag(self, t: torch.Tensor) -> bool:
        """A 0-d boolean read on the host (a device → host copy and a sync; counted)."""
        self.transfers["to_host"] += 1
        return bool(t)

    # ------------------------------------------------------------------ the parts
    def parts(self, theta: np.ndarray, w: np.ndarray, inv_sqrt_ps: np.ndarray, batch: np.ndarray) -> BatchParts:
        """The five parts of the records ``batch`` at ``(θ, W)`` (see the module docstring).

        Transfers per call: three host → device copies (the batch's inputs; θ, W and p^{-1/2} as
        one float64 vector; the batch's labels, groups and penalty rows as one int64 vector), one
        device → host copy (the five parts, loss, ψ and the clip count as one float64 vector), and
        one flag per chunk of per-record gradients (:meth:`_clipped_sums`)."""
        k, l, B = self.k, self.l, self.blocks
        theta = np.asarray(theta, dtype=np.float64).ravel()
        w = np.asarray(w, dtype=np.float64).ravel()
        inv = np.asarray(inv_sqrt_ps, dtype=np.float64).ravel()
        if theta.size != self.n_params:
            raise ValueError(f"theta has {theta.size} entries, the module has {self.n_params} trainable parameters")
        if w.size != B * k * l or inv.size != B * k:
            raise ValueError(f"W must have {B * k * l} entries and inv_sqrt_ps {B * k} (blocks={B}, k={k}, l={l}); "
                             f"got {w.size} and {inv.size}")
        rows = np.asarray(batch, dtype=np.int64).ravel()
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= self.n_records):
            raise ValueError(f"batch holds row indices outside 0..{self.n_records - 1}")
        dev, f64, m = self.device, torch.float64, self.denominator
        P, wl = self.n_params, B * k * l
        zeros_t = lambda: torch.zeros(P, dtype=f64, device=dev)  # noqa: E731
        zeros_w = lambda: torch.zeros(wl, dtype=f64, device=dev)  # noqa: E731
        if rows.size == 0:
            z = np.zeros(P)
            return BatchParts(z, z.copy(), z.copy(), np.zeros(wl), np.zeros(wl), 0.0, 0.0, 0)

        # The penalty: records in it and their block (the notion's, on the host).
        yb_h, sb_h = self._y_np[rows], self._s_np[rows]
        nb = rows.size
        blocks_h = self.notion.blocks_of(yb_h)
        idx_h = np.flatnonzero(blocks_h >= 0)
        bp_h = blocks_h[idx_h]
        n_pen = int(idx_h.size)
        x = self._inputs(torch.from_numpy(rows))
        ints = self._to_device(torch.from_numpy(np.concatenate([yb_h, idx_h, bp_h, sb_h[idx_h]])))
        yb, idx, bp, sp = ints.split([nb, n_pen, n_pen, n_pen])
        floats = self._to_device(torch.from_numpy(np.concatenate([theta, w, inv])))
        flat = floats[:P].to(self.dtype)
        W = floats[P:P + wl].view(B, k, l)
        invt = floats[P + wl:].view(B, k)

        # One forward pass with a graph; everything after the logits in float64.
        leaf = flat.detach().requires_grad_(True)
        logits = self._logits(leaf, x)
        F = probabilities(logits.detach().to(f64))
        onehot = torch.nn.functional.one_hot(yb, l).to(f64)
        Fy = F.gather(1, yb.view(-1, 1)).squeeze(1)
        loss = -torch.log(Fy.clamp_min(_TINY)).sum() / m
        v_loss = F - onehot

        # The pull-backs v = F ⊙ (g − F·g) of the penalty rows.
        every = n_pen == nb  # every record of the batch is in the penalty (idx = 0..nb-1)
        Fp = F if every else F[idx]
        q = (W * W).sum(dim=1)  # B × l
        qp = q[bp]
        cf = 2.0 * invt[bp, sp]  # 2 p_b(s_i)^{-1/2}
        beta = cf.unsqueeze(1) * W[bp, sp]  # β_i = 2 p^{-1/2} W_b[s_i, :]
        psi = (-(Fp * qp).sum(1) + (beta * Fp).sum(1) - 1.0).sum() / m

        def pull(g: torch.Tensor) -> torch.Tensor:
            return Fp * (g - (Fp * g).sum(1, keepdim=True))

        def batched(v: torch.Tensor) -> torch.Tensor:
            (gr,) = torch.autograd.grad(logits, leaf, grad_outputs=v.to(self.dtype), retain_graph=True)
            return gr.to(f64)

        def full(vp: torch.Tensor) -> torch.Tensor:  # penalty rows → all rows of the batch
            if every:
                return vp
            out = torch.zeros(nb, l, dtype=f64, device=dev)
            return out.index_copy_(0, idx, vp)

        n_clipped = torch.zeros((), dtype=f64, device=dev)
        # Parts left None are zero (not sent, or nothing in the penalty): filled in at the end.
        psi_theta_sfree: torch.Tensor | None = None
        psi_theta: torch.Tensor | None = None
        psi_w_sfree: torch.Tensor | None = None
        psi_w = zeros_w()
        if self.protect == "attribute":
            loss_grad = batched(v_loss) / m
            if self.send_psi and n_pen:
                psi_theta_sfree = batched(full(pull(-qp))) / m
                v_b = pull(beta)
                if math.isinf(self.clip_theta):
                    psi_theta = batched(full(v_b)) / m
                elif w.any():  # W = 0 (the first round): every b_i is 0
                    (sb_sum,), n_clipped = self._clipped_sums(leaf.detach(), x if every else x[idx], v_b.unsqueeze(1),
                                                              [self.clip_theta])
                    psi_theta = sb_sum / m
                # c: 2 p^{-1/2} F_i into row s_i of block b_i; a_W: −2 W_b diag(Σ F_i).
                rowsw = (bp * k + sp) * l
                cols = rowsw.unsqueeze(1) + torch.arange(l, device=dev)
                psi_w = psi_w.index_add_(0, cols.reshape(-1), (cf.unsqueeze(1) * Fp).reshape(-1)) / m
                prob_sum = torch.zeros(B, l, dtype=f64, device=dev).index_add_(0, bp, Fp)
                psi_w_sfree = (-2.0 * W * prob_sum.unsqueeze(1)).reshape(-1) / m
        else:
            # Record mode: every per-record part clipped; the ψ rows of non-penalty records are 0.
            with_psi = self.send_psi and n_pen > 0
            v_psi = full(pull(beta - qp)) if with_psi else torch.zeros_like(v_loss)
            if math.isinf(self.clip_loss) and (math.isinf(self.clip_theta) or not with_psi):
                loss_grad = batched(v_loss) / m
                if with_psi:
                    psi_theta = batched(v_psi) / m
            else:
                V = torch.stack([v_loss, v_psi], dim=1) if with_psi else v_loss.unsqueeze(1)
                clips = [self.clip_loss, self.clip_theta][: V.shape[1]]
                sums, n_clipped = self._clipped_sums(leaf.detach(), x, V, clips)
                loss_grad = sums[0] / m
                if with_psi:
                    psi_theta = sums[1] / m
            if with_psi:
                Wb = W[bp]  # nP × k × l
                rec = -2.0 * Wb * Fp.unsqueeze(1)
                rec[torch.arange(n_pen, device=dev), sp] += cf.unsqueeze(1) * Fp
                norms = torch.linalg.vector_norm(rec.reshape(n_pen, -1), dim=1)
                if not math.isinf(self.clip_w):
                    # Within C_W after rounding, as the θ parts (float64 here: a margin of ~1e-12).
                    factor, over = clip_factors(norms, self.clip_w * (1.0 - norm_margin(f64, [k * l])))
                    n_clipped = n_clipped + over.sum(dtype=f64)
                    rec = scale_rows(factor, rec)
                psi_w = (torch.zeros(B, k * l, dtype=f64, device=dev)
                         .index_add_(0, bp, rec.reshape(n_pen, k * l)).reshape(-1) / m)
        parts = (loss_grad, zeros_t() if psi_theta_sfree is None else psi_theta_sfree,
                 zeros_t() if psi_theta is None else psi_theta,
                 zeros_w() if psi_w_sfree is None else psi_w_sfree, psi_w)
        host = self._to_host(torch.cat([t.detach().to(f64) for t in parts]
                                       + [torch.stack([loss.detach(), psi.detach(), n_clipped])]))
        out = np.split(host, np.cumsum([P, P, P, wl, wl]))
        return BatchParts(*out[:5], loss=float(out[5][0]), psi=float(out[5][1]),
                          n_clipped=int(round(out[5][2])))
