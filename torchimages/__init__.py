"""Build, test and publish PyTorch + CUDA + cuDNN container images from a reviewed matrix."""

__version__ = "0.1.0"
