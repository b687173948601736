"""Deep models with SteFFLe: train any ``torch.nn.Module`` privately and fairly across silos.

* :class:`DeepSteFFLe` — the estimator (the settings of :class:`pfair.SteFFLe`, plus the module,
  ``input_shape``, ``device``, ``chunk_size`` and ``init_seed``);
* :class:`TorchProvider` — the gradient provider behind it (:mod:`pfair.providers.torch`): the five
  exact parts of a SteFFLe message, with per-record gradients (``torch.func``) only for the one
  s-dependent θ-part;
* :func:`load_image_folder` (UTKFace-style folders) and :func:`load_digits_fair` (scikit-learn's
  8×8 digits with an ink-mass group);
* :mod:`pfair.torch.models` — an MLP, a small CNN and ResNet-18 with GroupNorm.

Needs the ``torch`` extra (``pip install 'pfair[torch]'``). See ``docs/deep.md``.
"""

from pfair.providers.torch import TorchProvider, check_per_record, module_theta, set_module_theta
from pfair.torch.data import ImageDataset, load_digits_fair, load_image_folder
from pfair.torch.estimator import DeepSteFFLe, reset_parameters
from pfair.torch import models

__all__ = [
    "DeepSteFFLe",
    "ImageDataset",
    "TorchProvider",
    "check_per_record",
    "load_digits_fair",
    "load_image_folder",
    "models",
    "module_theta",
    "reset_parameters",
    "set_module_theta",
]
