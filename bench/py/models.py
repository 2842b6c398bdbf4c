"""hg-train's five models in PyTorch, layer for layer as examples/train/models.cpp builds them, so
that their state-dict keys are the same ("3.conv1.weight", "5.conv.3.weight", ...).

Used by tests/golden/make_model_parity.py (the parity fixtures) and bench/py/models_bench.py (the
PyTorch 2.x timings). Fixture and benchmark tooling only: nothing in the build or the tests needs
PyTorch.
"""
import torch
from torch import nn

MODEL_NAMES = ["mlp", "cnn", "mnist-net", "resnet", "mobilenet"]


class BasicBlock(nn.Module):
    """ResNet's basic block: conv3x3-BN-ReLU-conv3x3-BN + shortcut, ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + self.shortcut(x))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, depthwise 3x3, 1x1 linear bottleneck."""

    def __init__(self, cin, cout, stride, expansion):
        super().__init__()
        hidden = cin * expansion
        layers = []
        if expansion != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


def resnet20():
    layers = [nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    channels = 16
    for width in (16, 32, 64):
        for block in range(3):
            layers.append(BasicBlock(channels, width, 2 if block == 0 and width != 16 else 1))
            channels = width
    layers += [nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def mobilenet_v2_tiny():
    layers = [nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6()]
    channels = 16
    for expansion, width, blocks, stride in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2), (6, 64, 2, 1)]:
        for block in range(blocks):
            layers.append(InvertedResidual(channels, width, stride if block == 0 else 1, expansion))
            channels = width
    layers += [nn.Conv2d(channels, 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU6(),
               nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(128, 10)]
    return nn.Sequential(*layers)


def make_model(name, dropout=1.0):
    """dropout scales mnist-net's dropout probabilities (0: off, as the parity test needs)."""
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(32 * 7 * 7, 10))
    if name == "mnist-net":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Dropout(0.25 * dropout), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(),
                             nn.Dropout(0.5 * dropout), nn.Linear(128, 10))
    if name == "resnet":
        return resnet20()
    if name == "mobilenet":
        return mobilenet_v2_tiny()
    raise ValueError(f"unknown model {name!r} (expected one of {MODEL_NAMES})")
