"""Gradient providers: the one thing a model backend implements.

A provider computes, for a batch of its silo's records, the five exact parts of a SteFFLe message
(:class:`BatchParts`): the loss gradient g, the s-free ψ parts a_θ and a_W, and the s-dependent
sums of per-record clipped b_i and of c_i, each divided by the silo's fixed denominator m. The
silo party (:class:`pfair.protocol.SiloParty`) draws the batch, asks the provider, and adds the
noise; a provider never sees a noise key. :class:`LinearProvider` is the Rust kernel of the
linear-softmax model; :class:`pfair.providers.torch.TorchProvider` (``pfair[torch]``) computes the
same parts for any ``torch.nn.Module`` (``docs/deep.md``).
"""

from pfair.providers.base import BatchParts, GradientProvider
from pfair.providers.linear import LinearProvider

__all__ = ["BatchParts", "GradientProvider", "LinearProvider"]
