"""Small reference architectures that train with per-record gradients (no BatchNorm).

* :func:`mlp` — a multi-layer perceptron for tabular data;
* :class:`SmallCNN` — a CPU-sized convolutional net for 8×8 digits or small images;
* :func:`resnet18_groupnorm` — ResNet-18 (He, Zhang, Ren and Sun, "Deep Residual Learning for
  Image Recognition", 2016) with every BatchNorm replaced by GroupNorm (Wu and He, "Group
  Normalization", 2018), the usual choice for DP training (e.g. Kurakin et al., "Toward Training at
  ImageNet Scale with Differential Privacy", 2022). Defined here, so torchvision is not needed, and
  never loaded with pretrained weights.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

__all__ = ["mlp", "SmallCNN", "resnet18_groupnorm", "BasicBlock", "ResNet"]


def mlp(n_features: int, n_classes: int, hidden: Sequence[int] = (64,), *, activation: type = nn.Tanh,
        dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """``Linear → activation → … → Linear(n_classes)``. Smooth activations (tanh) keep the
    per-record gradients well behaved under clipping."""
    layers: list[nn.Module] = []
    width = int(n_features)
    for h in hidden:
        layers += [nn.Linear(width, int(h)), activation()]
        width = int(h)
    layers.append(nn.Linear(width, int(n_classes)))
    return nn.Sequential(*layers).to(dtype)


class SmallCNN(nn.Module):
    """Two 3×3 convolutions with GroupNorm and tanh (the second with stride 2), then a linear head
    on the flattened feature map (``image_size`` pixels per side; 8×8 digits: 1 × 8 × 8 inputs,
    a 2·width × 4 × 4 map, 6.7 k parameters at ``width=8``)."""

    def __init__(self, in_channels: int = 1, n_classes: int = 10, width: int = 8, groups: int = 4,
                 image_size: int = 8) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.GroupNorm(min(groups, width), width), nn.Tanh(),
            nn.Conv2d(width, 2 * width, 3, padding=1, stride=2), nn.GroupNorm(min(groups, 2 * width), 2 * width),
            nn.Tanh(),
        )
        side = (int(image_size) + 1) // 2
        self.head = nn.Linear(2 * width * side * side, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def _norm(channels: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(groups, channels), channels)


class BasicBlock(nn.Module):
    """ResNet's basic block (two 3×3 convolutions) with GroupNorm."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1, groups: int = 32) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.gn1 = _norm(planes, groups)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.gn2 = _norm(planes, groups)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                                          _norm(planes, groups))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet of :class:`BasicBlock` stages. ``small_input=True`` uses a 3×3 stem without max
    pooling (for 32–64 pixel images, as for CIFAR); False the ImageNet stem (7×7, stride 2, pool)."""

    def __init__(self, blocks: Sequence[int], n_classes: int, in_channels: int = 3, width: int = 64,
                 groups: int = 32, small_input: bool = True) -> None:
        super().__init__()
        if small_input:
            self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
                                      _norm(width, groups), nn.ReLU())
        else:
            self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False),
                                      _norm(width, groups), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1))
        layers: list[nn.Module] = []
        in_planes = width
        for i, n in enumerate(blocks):
            planes = width * 2**i
            for j in range(n):
                layers.append(BasicBlock(in_planes, planes, stride=2 if (i > 0 and j == 0) else 1, groups=groups))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(in_planes, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.stem(x)).mean(dim=(2, 3)))


def resnet18_groupnorm(n_classes: int = 9, in_channels: int = 3, *, width: int = 64, groups: int = 32,
                       small_input: bool = True) -> ResNet:
    """ResNet-18 (stages of 2, 2, 2, 2 basic blocks; 11.2 M parameters at ``width=64`` and 9
    classes) with GroupNorm of ``groups`` groups in place of BatchNorm. ``width=16`` gives a
    ~0.7 M-parameter variant that trains on a CPU."""
    return ResNet([2, 2, 2, 2], n_classes, in_channels=in_channels, width=width, groups=groups,
                  small_input=small_input)
